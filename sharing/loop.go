package sharing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/costwise/batcher/lease"
)

// loop is the partition table and schedule of a Resource, and its methods
// are the operations of the loop goroutine. It is
// owned by the loop goroutine: only run and the methods it calls touch it.
type loop struct {
	r          *Resource
	table      leaseTable
	wanted     int       // partitions wanted at the last pass
	published  uint32    // demand last published; zero when none is live
	heartbeat  time.Time // when the demand must be published again
	listAt     time.Time // when the next snapshot is due
	lastList   time.Time // when the last snapshot was taken
	share      int       // fair share computed from the last snapshot
	homeLo     int       // home range [homeLo, homeHi) from the last snapshot
	homeHi     int
	peak       int               // highest demand lately, held by damp
	peakUntil  time.Time         // when a fall below peak may take effect
	holdUntil  time.Time         // when a held fall takes effect; zero if none
	failures   int               // consecutive passes with a storage error
	failed     bool              // a storage call failed in this pass
	provision  bool              // the store lost partitions; provision again
	wiped      bool              // the store lost its leases: hold, re-take ours
	uncertain  map[int]bool      // acquires whose outcome is unknown
	demands    map[string]uint32 // the demands seen at the last snapshot, own included
	listedOK   time.Time         // when the last snapshot that succeeded was read
	graceUntil time.Time         // until then, demands that lapsed in an outage count (see keepLapsed)

	// Rotation of the remainder partitions (see fairShares and rotate).
	shares        map[string]int // every owner's share, as last computed
	epoch         uint64         // the rotation epoch of shares
	extras        int            // partitions that rotate under shares (see epochLength)
	turnAt        uint64         // the next epoch at which this instance's share changes,
	turns         bool           // if it changes at all while the demands stay the same
	rotating      bool           // shares had a remainder that rotates
	gainLo        int            // places [gainLo, gainHi) among the partitions
	gainHi        int            // freed by the last rotation, while handing over
	handoverUntil time.Time      // when the hand-over of a rotation is over
	handoverWait  time.Duration  // wait before the next look while handing over
	keepTurn      bool           // turns were recomputed mid-epoch: a turn held runs to the boundary
}

// newLoop returns the loop state of r, holding nothing.
func newLoop(r *Resource) *loop {
	return &loop{r: r, table: leaseTable{}, uncertain: map[int]bool{}}
}

// run is the loop goroutine: it makes a pass over the lease table, sleeps
// until the pass says, or until GiveMe or SetSharedCapacity wake it, and on
// cancellation gives everything back. It closes done when it returns.
func (r *Resource) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	l := newLoop(r)
	timer := r.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next, ok := l.pass(ctx)
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
			l.shutdown(ctx)
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
func (l *loop) pass(ctx context.Context) (time.Time, bool) {
	l.failed = false
	count := l.r.partitionCount()
	if l.r.reprovision.Swap(false) {
		l.provision = true
	}
	if l.provision {
		l.provisionAgain(ctx, count)
	}
	now := l.r.clock.Now()
	l.dropLost(ctx, now, count)
	wanted := l.noteWanted(l.r.wantedFor(l.r.target.Load(), count), now)
	l.rotate(wanted, count, now)
	// A fall in demand gives partitions back before anything else.
	l.releaseAbove(ctx, l.keepFloor(wanted), "above target")
	listing := wanted > 0 && !now.Before(l.listAt)
	l.publishDemand(ctx, uint32(wanted), now, listing)
	if wanted > 0 {
		l.renewDue(ctx, now)
		// Right after a failure a listing would most likely fail too; it
		// waits for the back-off, while renewals still get their try.
		if listing && !l.failed {
			l.rebalance(ctx, wanted, count, now)
		}
	}
	return l.finishPass(wanted, now)
}

// noteWanted damps the partitions wanted (see damp) and records them; a
// rise the table does not cover brings the next snapshot forward, at most
// every maxInterval/4. It returns the damped number.
func (l *loop) noteWanted(raw int, now time.Time) int {
	wanted := l.damp(raw, now)
	if wanted > l.wanted && wanted > len(l.table) {
		soonest := l.lastList.Add(l.r.maxInterval / 4)
		l.listAt = now
		if soonest.After(now) {
			l.listAt = soonest
		}
	}
	if wanted == 0 {
		l.share = 0
	}
	l.wanted = wanted
	l.r.stats.demand.Store(int64(wanted))
	return wanted
}

// damp holds a fall in demand, other than to zero, for 2 x maxInterval
// after demand was last seen higher. A Batcher's target moves with every
// batch; without the hold a demand that flaps between 6 and 7 partitions
// would release and win a partition, and publish its demand, several times
// a second. A fall to zero acts at once, so an instance that no longer
// needs anything hands its partitions over without delay.
func (l *loop) damp(raw int, now time.Time) int {
	l.holdUntil = time.Time{}
	if raw == 0 || raw >= l.peak || !now.Before(l.peakUntil) {
		l.peak, l.peakUntil = raw, now.Add(2*l.r.maxInterval)
		return raw
	}
	l.holdUntil = l.peakUntil
	return l.peak
}

// applyShares computes every owner's fair share of count partitions from
// demands at the rotation epoch of now, and this instance's share and home
// range.
func (l *loop) applyShares(count int, demands map[string]uint32, now time.Time) {
	computed := l.shares != nil
	sp := newSplit(count, demands)
	l.extras = sp.extras()
	epoch := l.r.epochAt(now, l.extras)
	l.shares, l.rotating = sp.at(epoch), sp.rotating
	l.turnAt, l.turns = sp.nextTurn(l.r.owner, epoch)
	l.keepTurn = computed && l.rotating && epoch == l.epoch && takingTurns(l.shares)
	l.epoch = epoch
	l.share = l.shares[l.r.owner]
	l.homeLo, l.homeHi = homeRange(l.r.owner, l.shares)
}

// keepFloor returns how many partitions this instance keeps when it wants
// wanted: its share, or, when the instances take turns (every share is a
// single partition) and a demand changed since the epoch began, the one
// partition it holds. Any change in who asks moves every turn (see
// fairShares); the instances see the change at their next listing, spread
// over a second or so, and the holders that gave their turn up at once would
// leave it idle until its new holder listed. Kept to the epoch's end, a
// turn moves on at the boundary with the others, where every instance
// hands over at the same moment; meanwhile the instances whose turn it now
// is take what is free, such as the partition of one that stopped asking.
func (l *loop) keepFloor(wanted int) int {
	floor := min(wanted, l.share)
	if l.keepTurn {
		floor = max(floor, min(wanted, len(l.table), 1))
	}
	return floor
}

// takingTurns reports whether every share is at most one partition, so
// that the instances take turns at every partition.
func takingTurns(shares map[string]int) bool {
	for _, n := range shares {
		if n > 1 {
			return false
		}
	}
	return true
}

// rotate moves the shares on to the epoch of now when the last shares had
// a remainder, which rotates among the instances (see fairShares). It uses
// the demands of the last snapshot, which every instance has read alike, so
// all of them move their shares at the same boundary without a storage
// call. An instance that loses a partition gives it up in this pass; one
// that gains lists a moment later, once the losers have released, and takes
// its own places among the freed partitions (see gainRange), trying again
// after waits that double from maxInterval/50, for one maxInterval, if they
// are not free yet.
func (l *loop) rotate(wanted, count int, now time.Time) {
	if !l.rotating || l.demands == nil || wanted == 0 || l.r.rotation <= 0 {
		return
	}
	if l.r.epochAt(now, l.extras) == l.epoch {
		return
	}
	before := l.shares
	l.applyShares(count, l.demands, now)
	l.r.stats.share.Store(int64(l.share))
	if lo, hi := gainRange(l.r.owner, before, l.shares); hi > lo && wanted > len(l.table) {
		l.gainLo, l.gainHi = lo, hi
		l.handoverUntil = now.Add(l.r.maxInterval)
		// The losers release in their pass at the boundary: look a moment
		// later, then again after waits that double (see rebalance), so a
		// loser that is a little late costs little idle time and one that
		// is stalled costs few calls.
		l.handoverWait = l.r.maxInterval / 50
		l.listAt = now.Add(l.r.maxInterval / 100)
	}
}

// finishPass publishes the table and the capacity, and computes when the
// next pass is due.
func (l *loop) finishPass(wanted int, now time.Time) (time.Time, bool) {
	l.publishView()
	l.noteCapacity()
	l.r.stats.share.Store(int64(l.share))
	if l.failed {
		l.failures++
	} else {
		l.failures = 0
	}
	if wanted == 0 && len(l.table) == 0 && l.published == 0 && !l.failed && !l.provision {
		return time.Time{}, false
	}
	next := now.Add(l.r.backoff(l.failures))
	if l.failures == 0 {
		next = l.listAt
		if wanted == 0 {
			next = now.Add(l.r.leaseDuration)
		}
		if l.published > 0 && l.heartbeat.Before(next) {
			next = l.heartbeat
		}
		if !l.holdUntil.IsZero() && l.holdUntil.Before(next) {
			next = l.holdUntil
		}
	}
	if l.rotating && wanted > 0 && l.r.rotation > 0 {
		// Only the epochs at which this instance's own share changes need a
		// pass; the others hand their extra partitions on among themselves.
		if at := l.r.epochStart(l.turnAt, l.extras); l.turns && at.Before(next) {
			next = at
		}
	}
	if at, ok := l.table.nextEvent(now); ok && at.Before(next) {
		next = at
	}
	if floor := now.Add(time.Millisecond); next.Before(floor) {
		next = floor
	}
	return next, true
}

// backoff returns the wait after failures consecutive failed passes:
// doubling from maxInterval to at most twice maxInterval (and at most a
// quarter of the lease, so renewals get several tries), with jitter so
// instances do not retry in step. The cap is short on purpose: a store that
// comes back after an outage (restarted, maybe empty) is noticed within
// about a second, which a recovery needs more than a failing store needs
// fewer calls (one pass, whose first failing call ends it, per 0.5 to 1 s
// with the defaults).
func (r *Resource) backoff(failures int) time.Duration {
	if failures == 0 {
		return 0
	}
	d := r.maxInterval
	for i := 1; i < failures && d < r.leaseDuration; i++ {
		d *= 2
	}
	d = min(d, max(min(r.leaseDuration/4, 2*r.maxInterval), r.maxInterval))
	return d/2 + time.Duration(r.random()*float64(d/2))
}

// jitter returns a random duration in [lo, hi) times maxInterval.
func (r *Resource) jitter(lo, hi float64) time.Duration {
	return time.Duration((lo + r.random()*(hi-lo)) * float64(r.maxInterval))
}

// publishView makes the table's validity deadlines visible to Capacity.
func (l *loop) publishView() {
	v := l.table.view()
	l.r.valid.Store(&v)
}

// fail records a storage error: an error event, unless the loop is ending,
// and back-off for the next pass.
func (l *loop) fail(ctx context.Context, what string, err error) {
	l.failed = true
	if ctx.Err() != nil {
		return
	}
	var missing lease.PartitionMissingError
	if errors.As(err, &missing) {
		l.noteLoss()
	}
	l.r.stats.errs.Add(1)
	l.r.emitLoop(ErrorEvent, 0, fmt.Sprintf("batcher: %s: %v", what, err), err)
}

// provisionAgain provisions count partitions, when the store lost them or
// the shared capacity grew.
func (l *loop) provisionAgain(ctx context.Context, count int) {
	cctx, cancel := context.WithTimeout(ctx, l.r.callTimeout())
	defer cancel()
	if l.wiped {
		// The hold goes out before any partition exists again, so every
		// instance that can see a partition can see the hold.
		if err := l.r.stats.count(l.r.mgr.PublishDemand(cctx, HoldOwner, 1, l.r.leaseDuration)); err != nil {
			l.fail(ctx, "publish the hold after a data loss", err)
			return
		}
	}
	err := l.r.provisionStore(cctx, count)
	l.noteCapacity()
	if err != nil {
		l.fail(ctx, "provision", err)
		return
	}
	l.provision = false
	if l.wiped {
		l.wiped = false
		l.retake(ctx)
	}
}

// publishDemand publishes w when the heartbeat of the live record is due,
// or when w differs from it and either falls (zero withdraws the record) or
// the pass lists: others read demands only when they list, so a rise needs
// to be out just before this instance's own listing, and rises between
// listings cost one call, not one each.
func (l *loop) publishDemand(ctx context.Context, w uint32, now time.Time, listing bool) {
	changed := w != l.published && (listing || w < l.published)
	due := l.published > 0 && !now.Before(l.heartbeat)
	if !changed && !due {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, l.r.callTimeout())
	defer cancel()
	err := l.r.stats.count(l.r.mgr.PublishDemand(cctx, l.r.owner, w, l.r.leaseDuration))
	l.noteCapacity()
	if err != nil {
		l.fail(ctx, "publish demand", err)
		return
	}
	l.published = w
	// A little jitter keeps instances that started together from writing
	// their heartbeats in step, which a store with one record for all of
	// them (the Azure lease table) would serialise.
	l.heartbeat = now.Add(l.r.leaseDuration/3 - time.Duration(l.r.random()*float64(l.r.leaseDuration/30)))
}

// noteCapacity raises the capacity event if Capacity has changed: at the
// end of a pass, and after each storage call, so that leases that stop
// counting while a pass waits on a store that hangs are told within one
// call's timeout, not at the end of a pass of several. Loop goroutine only.
func (l *loop) noteCapacity() {
	l.r.loopCapacity(l.r.capacityAt(l.r.clock.Now()))
}

// callTimeout bounds one storage call, so that a hung call cannot hold the
// loop past the renewals it owes.
func (r *Resource) callTimeout() time.Duration {
	return max(min(r.leaseDuration/3, 5*time.Second), 100*time.Millisecond)
}
