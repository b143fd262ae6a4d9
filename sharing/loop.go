package sharing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/costwise/batcher/lease"
)

// loopState is the partition table and schedule of a Resource. It is
// owned by the loop goroutine: only run and the methods it calls touch it.
type loopState struct {
	table     leaseTable
	wanted    int       // partitions wanted at the last pass
	published uint32    // demand last published; zero when none is live
	heartbeat time.Time // when the demand must be published again
	listAt    time.Time // when the next snapshot is due
	lastList  time.Time // when the last snapshot was taken
	share     int       // fair share computed from the last snapshot
	homeLo    int       // home range [homeLo, homeHi) from the last snapshot
	homeHi    int
	peak      int               // highest demand lately, held by damp
	peakUntil time.Time         // when a fall below peak may take effect
	holdUntil time.Time         // when a held fall takes effect; zero if none
	failures  int               // consecutive passes with a storage error
	failed    bool              // a storage call failed in this pass
	provision bool              // the store lost partitions; provision again
	wiped     bool              // the store lost its leases: hold, re-take ours
	uncertain map[int]bool      // acquires whose outcome is unknown
	demands   map[string]uint32 // the demands seen at the last snapshot, own included
}

// run is the loop goroutine: it makes a pass over the lease table, sleeps
// until the pass says, or until GiveMe or SetSharedCapacity wake it, and on
// cancellation gives everything back. It closes done when it returns.
func (r *Resource) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	st := &loopState{table: leaseTable{}, uncertain: map[int]bool{}}
	timer := r.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next, ok := r.pass(ctx, st)
		if !timer.Stop() {
			// Drop a tick that fired while the pass ran; a spurious pass is
			// harmless, but an early one would shorten the pacing.
			select {
			case <-timer.C():
			default:
			}
		}
		if ok {
			timer.Reset(next.Sub(r.clock.Now()))
		}
		select {
		case <-ctx.Done():
			r.shutdown(ctx, st)
			return
		case <-r.wake:
		case <-timer.C():
		}
	}
}

// pass does what is due: provisioning, dropping lost leases, publishing the
// demand, renewing, listing, releasing and acquiring. It returns when the
// next pass is due, or false when the instance is idle and only a wake can
// give it work.
func (r *Resource) pass(ctx context.Context, st *loopState) (time.Time, bool) {
	st.failed = false
	count := r.partitionCount()
	if r.reprovision.Swap(false) {
		st.provision = true
	}
	if st.provision {
		r.provisionAgain(ctx, st, count)
	}
	now := r.clock.Now()
	r.dropLost(ctx, st, now, count)
	wanted := r.noteWanted(st, r.wantedFor(r.target.Load(), count), now)
	// A fall in demand gives partitions back before anything else.
	r.releaseAbove(ctx, st, min(wanted, st.share), "above target")
	listing := wanted > 0 && !now.Before(st.listAt)
	r.publishDemand(ctx, st, uint32(wanted), now, listing)
	if wanted > 0 {
		r.renewDue(ctx, st, now)
		// Right after a failure a listing would most likely fail too; it
		// waits for the back-off, while renewals still get their try.
		if listing && !st.failed {
			r.rebalance(ctx, st, wanted, count, now)
		}
	}
	return r.finishPass(st, wanted, now)
}

// noteWanted damps the partitions wanted (see damp) and records them; a
// rise the table does not cover brings the next snapshot forward, at most
// every maxInterval/4. It returns the damped number.
func (r *Resource) noteWanted(st *loopState, raw int, now time.Time) int {
	wanted := r.damp(st, raw, now)
	if wanted > st.wanted && wanted > len(st.table) {
		soonest := st.lastList.Add(r.maxInterval / 4)
		st.listAt = now
		if soonest.After(now) {
			st.listAt = soonest
		}
	}
	if wanted == 0 {
		st.share = 0
	}
	st.wanted = wanted
	r.stats.demand.Store(int64(wanted))
	return wanted
}

// damp holds a fall in demand, other than to zero, for 2 x maxInterval
// after demand was last seen higher. A Batcher's target moves with every
// batch; without the hold a demand that flaps between 6 and 7 partitions
// would release and win a partition, and publish its demand, several times
// a second. A fall to zero acts at once, so an instance that no longer
// needs anything hands its partitions over without delay.
func (r *Resource) damp(st *loopState, raw int, now time.Time) int {
	st.holdUntil = time.Time{}
	if raw == 0 || raw >= st.peak || !now.Before(st.peakUntil) {
		st.peak, st.peakUntil = raw, now.Add(2*r.maxInterval)
		return raw
	}
	st.holdUntil = st.peakUntil
	return st.peak
}

// finishPass publishes the table and the capacity, and computes when the
// next pass is due.
func (r *Resource) finishPass(st *loopState, wanted int, now time.Time) (time.Time, bool) {
	r.publishView(st)
	r.loopCapacity(r.capacityAt(now))
	r.stats.share.Store(int64(st.share))
	if st.failed {
		st.failures++
	} else {
		st.failures = 0
	}
	if wanted == 0 && len(st.table) == 0 && st.published == 0 && !st.failed && !st.provision {
		return time.Time{}, false
	}
	next := now.Add(r.backoff(st.failures))
	if st.failures == 0 {
		next = st.listAt
		if wanted == 0 {
			next = now.Add(r.leaseDuration)
		}
		if st.published > 0 && st.heartbeat.Before(next) {
			next = st.heartbeat
		}
		if !st.holdUntil.IsZero() && st.holdUntil.Before(next) {
			next = st.holdUntil
		}
	}
	if at, ok := st.table.nextEvent(now); ok && at.Before(next) {
		next = at
	}
	if floor := now.Add(time.Millisecond); next.Before(floor) {
		next = floor
	}
	return next, true
}

// backoff returns the wait after failures consecutive failed passes:
// doubling from maxInterval, at most a quarter of the lease so renewals get
// several tries, with jitter so instances do not retry in step.
func (r *Resource) backoff(failures int) time.Duration {
	if failures == 0 {
		return 0
	}
	d := r.maxInterval
	for i := 1; i < failures && d < r.leaseDuration; i++ {
		d *= 2
	}
	d = min(d, max(r.leaseDuration/4, r.maxInterval))
	return d/2 + time.Duration(r.random()*float64(d/2))
}

// jitter returns a random duration in [lo, hi) times maxInterval.
func (r *Resource) jitter(lo, hi float64) time.Duration {
	return time.Duration((lo + r.random()*(hi-lo)) * float64(r.maxInterval))
}

// publishView makes the table's validity deadlines visible to Capacity.
func (r *Resource) publishView(st *loopState) {
	v := st.table.view()
	r.valid.Store(&v)
}

// fail records a storage error: an error event, unless the loop is ending,
// and back-off for the next pass.
func (r *Resource) fail(ctx context.Context, st *loopState, what string, err error) {
	st.failed = true
	if ctx.Err() != nil {
		return
	}
	var missing lease.PartitionMissingError
	if errors.As(err, &missing) {
		r.noteLoss(st)
	}
	r.stats.errs.Add(1)
	r.emitLoop(ErrorEvent, 0, fmt.Sprintf("batcher: %s: %v", what, err), err)
}

// provisionAgain provisions count partitions, when the store lost them or
// the shared capacity grew.
func (r *Resource) provisionAgain(ctx context.Context, st *loopState, count int) {
	cctx, cancel := context.WithTimeout(ctx, r.callTimeout())
	defer cancel()
	if st.wiped {
		// The hold goes out before any partition exists again, so every
		// instance that can see a partition can see the hold.
		if err := r.stats.count(r.mgr.PublishDemand(cctx, HoldOwner, 1, r.leaseDuration)); err != nil {
			r.fail(ctx, st, "publish the hold after a data loss", err)
			return
		}
	}
	if err := r.provisionStore(cctx, count); err != nil {
		r.fail(ctx, st, "provision", err)
		return
	}
	st.provision = false
	if st.wiped {
		st.wiped = false
		r.retake(ctx, st)
	}
}

// publishDemand publishes w when the heartbeat of the live record is due,
// or when w differs from it and either falls (zero withdraws the record) or
// the pass lists: others read demands only when they list, so a rise needs
// to be out just before this instance's own listing, and rises between
// listings cost one call, not one each.
func (r *Resource) publishDemand(ctx context.Context, st *loopState, w uint32, now time.Time, listing bool) {
	changed := w != st.published && (listing || w < st.published)
	due := st.published > 0 && !now.Before(st.heartbeat)
	if !changed && !due {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, r.callTimeout())
	defer cancel()
	err := r.stats.count(r.mgr.PublishDemand(cctx, r.owner, w, r.leaseDuration))
	if err != nil {
		r.fail(ctx, st, "publish demand", err)
		return
	}
	st.published = w
	st.heartbeat = now.Add(r.leaseDuration / 3)
}

// callTimeout bounds one storage call, so that a hung call cannot hold the
// loop past the renewals it owes.
func (r *Resource) callTimeout() time.Duration {
	return max(min(r.leaseDuration/3, 5*time.Second), 100*time.Millisecond)
}
