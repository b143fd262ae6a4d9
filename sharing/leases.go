package sharing

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/costwise/batcher/lease"

	"golang.org/x/sync/errgroup"
)

// maxParallel bounds the storage calls a pass makes at once.
const maxParallel = 8

// releaseTimeout bounds the releases Stop makes.
const releaseTimeout = 2 * time.Second

// callResult is the outcome of one lease call on a partition.
type callResult struct {
	partition int
	sent      time.Time // when the request was sent
	err       error
}

// each is Resource.each for the loop goroutine, followed by noteCapacity.
func (l *loop) each(ctx context.Context, partitions []int, call func(context.Context, int) error) []callResult {
	results := l.r.each(ctx, partitions, call)
	l.noteCapacity()
	return results
}

// each calls call for every partition, at most maxParallel at a time, each
// with its own timeout, and returns when all have returned. The goroutines
// it starts end before it returns. A panicking lease.Manager becomes an
// error rather than a crash.
func (r *Resource) each(ctx context.Context, partitions []int, call func(context.Context, int) error) []callResult {
	results := make([]callResult, len(partitions))
	// The group collects no error: each call's outcome is its own result,
	// and one failure must not cancel the others.
	var g errgroup.Group
	g.SetLimit(maxParallel)
	for k, p := range partitions {
		g.Go(func() error {
			cctx, cancel := context.WithTimeout(ctx, r.callTimeout())
			defer cancel()
			results[k] = callResult{partition: p, sent: r.clock.Now()}
			results[k].err = r.stats.count(guard(func() error { return call(cctx, p) }))
			return nil
		})
	}
	_ = g.Wait()
	return results
}

// guard runs fn and turns a panic into an error.
func guard(fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("batcher: lease manager panicked: %v", v)
		}
	}()
	return fn()
}

// isMissing reports whether err is a lease.PartitionMissingError.
func isMissing(err error) bool {
	var missing lease.PartitionMissingError
	return errors.As(err, &missing)
}

// forget drops a lease the store no longer gives this instance, without
// asking the store anything.
func (l *loop) forget(p int, why string) {
	delete(l.table, p)
	l.publishView()
	l.r.stats.releases.Add(1)
	l.r.emitLoop(ReleasedEvent, p, why, nil)
}

// isConflict reports whether err is a lease.ConflictError.
func isConflict(err error) bool {
	var conflict lease.ConflictError
	return errors.As(err, &conflict)
}

// dropLost forgets leases that surely ended at the store (their renewal
// kept failing) and gives up partitions beyond count (the shared capacity
// shrank).
func (l *loop) dropLost(ctx context.Context, now time.Time, count int) {
	for _, p := range l.table.expired(now) {
		l.forget(p, "lease expired before it could be renewed")
	}
	var beyond []int
	for _, p := range l.table.indexes() {
		if p >= count {
			beyond = append(beyond, p)
		}
	}
	l.release(ctx, beyond, "partition beyond the shared capacity")
}

// releaseAbove gives up the leases beyond target, those others prefer
// first.
func (l *loop) releaseAbove(ctx context.Context, target int, why string) {
	excess := len(l.table) - max(target, 0)
	if excess <= 0 {
		return
	}
	order := releaseOrder(l.r.owner, l.table.indexes(), l.homeLo, l.homeHi)
	l.release(ctx, order[:excess], why)
}

// release gives up partitions. They stop counting as capacity before the
// store is asked to end their leases, so this instance never counts a
// partition another may already have taken.
func (l *loop) release(ctx context.Context, partitions []int, why string) {
	if len(partitions) == 0 {
		return
	}
	for _, p := range partitions {
		delete(l.table, p)
	}
	l.publishView()
	l.r.loopCapacity(l.r.Capacity())
	results := l.releaseCalls(ctx, partitions)
	for _, res := range results {
		l.r.stats.releases.Add(1)
		l.r.emitLoop(ReleasedEvent, res.partition, why, nil)
		// A conflict means the lease had already ended; any other error
		// leaves it to expire at the store, which is safe, but is worth
		// reporting.
		if res.err != nil && !isConflict(res.err) {
			l.fail(ctx, fmt.Sprintf("release partition %d", res.partition), res.err)
		}
	}
}

// renewDue renews the leases whose renewal time has come. A lease lost to
// a conflict is dropped at once, unless it is still valid (see
// refusedWhileValid); one whose renewal failed otherwise is kept (it may
// still be ours) and retried until it expires.
func (l *loop) renewDue(ctx context.Context, now time.Time) {
	// A renewal round starts up to a twentieth of the lease early, at
	// random, so the rounds of instances that acquired together drift apart
	// instead of meeting at the store every round.
	due := l.table.dueForRenewal(now.Add(time.Duration(l.r.random() * float64(l.r.leaseDuration/20))))
	if len(due) == 0 {
		return
	}
	var results []callResult
	b, batch := l.r.mgr.(lease.BatchRenewer)
	if batch {
		// Leases that fall due soon go along, so the leases held line up
		// on one call per renewal round however they were acquired.
		due = l.table.dueForRenewal(now.Add(l.r.leaseDuration / 3))
	}
	if batch && len(due) > 1 {
		results = l.batch(ctx, due, func(cctx context.Context, ps []int) ([]error, error) {
			return b.RenewBatch(cctx, ps, l.r.owner, l.r.leaseDuration)
		})
	} else {
		results = l.each(ctx, due, func(cctx context.Context, p int) error {
			return l.r.mgr.Renew(cctx, p, l.r.owner, l.r.leaseDuration)
		})
	}
	for _, res := range results {
		switch {
		case res.err == nil:
			l.table[res.partition] = newHeldLease(res.sent, l.r.leaseDuration)
			l.r.stats.renewals.Add(1)
		case isMissing(res.err):
			l.noteLoss()
		case isConflict(res.err) && l.refusedWhileValid(res.partition):
			l.noteLoss()
		case isConflict(res.err):
			l.forget(res.partition, "lease lost")
		default:
			l.fail(ctx, fmt.Sprintf("renew partition %d", res.partition), res.err)
		}
	}
	l.publishView()
}

// refusedWhileValid reports whether the lease on p, whose renewal the store
// refused, is still valid: then the store lost it, as readPartitions
// reasons for a snapshot. No other instance can have been granted a lease
// this instance still counts, so the refusal means the store no longer has
// the lease (it restarted empty, or failed over to a replica without it),
// and another instance that noticed the loss first has provisioned the
// partitions again. Dropping the lease would leave the partition to the
// hold that instance published, idle for a lease duration; keeping it and
// treating the refusal as the loss it is re-takes it at once (see retake).
func (l *loop) refusedWhileValid(p int) bool {
	held, ok := l.table[p]
	return ok && l.r.clock.Now().Before(held.validUntil)
}

// batch makes one call for several partitions to a lease.Manager that
// takes batches (call), and returns each partition's outcome; a failed call
// is the outcome of every one.
func (l *loop) batch(ctx context.Context, partitions []int, call func(ctx context.Context, partitions []int) ([]error, error)) []callResult {
	cctx, cancel := context.WithTimeout(ctx, l.r.callTimeout())
	defer cancel()
	sent := l.r.clock.Now()
	var errs []error
	err := l.r.stats.count(guard(func() error {
		var err error
		errs, err = call(cctx, partitions)
		if err == nil && len(errs) != len(partitions) {
			err = fmt.Errorf("batcher: lease manager was asked about %d leases and answered %d results", len(partitions), len(errs))
		}
		return err
	}))
	l.noteCapacity()
	results := make([]callResult, len(partitions))
	for i, p := range partitions {
		results[i] = callResult{partition: p, sent: sent, err: err}
		if err == nil {
			results[i].err = errs[i]
			if isConflict(errs[i]) {
				l.r.stats.conflicts.Add(1)
			}
		}
	}
	return results
}

// acquireCalls acquires partitions for this instance: in one call when
// the manager is a lease.BatchAcquirer and there are several, else one
// call per partition.
func (l *loop) acquireCalls(ctx context.Context, partitions []int) []callResult {
	if b, ok := l.r.mgr.(lease.BatchAcquirer); ok && len(partitions) > 1 {
		return l.batch(ctx, partitions, func(cctx context.Context, ps []int) ([]error, error) {
			return b.AcquireBatch(cctx, ps, l.r.owner, l.r.leaseDuration)
		})
	}
	return l.each(ctx, partitions, func(cctx context.Context, p int) error {
		return l.r.mgr.Acquire(cctx, p, l.r.owner, l.r.leaseDuration)
	})
}

// releaseCalls releases partitions of this instance: in one call when the
// manager is a lease.BatchReleaser and there are several, else one call per
// partition.
func (l *loop) releaseCalls(ctx context.Context, partitions []int) []callResult {
	if b, ok := l.r.mgr.(lease.BatchReleaser); ok && len(partitions) > 1 {
		return l.batch(ctx, partitions, func(cctx context.Context, ps []int) ([]error, error) {
			return b.ReleaseBatch(cctx, ps, l.r.owner)
		})
	}
	return l.each(ctx, partitions, func(cctx context.Context, p int) error {
		return l.r.mgr.Release(cctx, p, l.r.owner)
	})
}

// acquire tries to lease partitions and adds those won to the table.
func (l *loop) acquire(ctx context.Context, partitions []int) {
	if len(partitions) == 0 {
		return
	}
	results := l.acquireCalls(ctx, partitions)
	for _, res := range results {
		switch {
		case res.err == nil:
			l.table[res.partition] = newHeldLease(res.sent, l.r.leaseDuration)
			delete(l.uncertain, res.partition)
		case isConflict(res.err):
			// Another owner holds it: an earlier acquire whose outcome was
			// unknown did not win it, or no longer holds it.
			delete(l.uncertain, res.partition)
			l.r.emitLoop(FailedEvent, res.partition, "", nil)
		default:
			// The store may have granted the lease before the call failed;
			// the next listing acquires it again if it shows it leased
			// (see unsure), and Stop releases such partitions in case.
			l.uncertain[res.partition] = true
			l.fail(ctx, fmt.Sprintf("acquire partition %d", res.partition), res.err)
		}
	}
	l.publishView()
	for _, res := range results {
		if res.err == nil {
			l.r.stats.acquisitions.Add(1)
			l.r.emitLoop(AllocatedEvent, res.partition, "", nil)
		}
	}
}

// rebalance reads a snapshot, computes this instance's fair share, gives
// back what is above it and acquires free partitions up to it.
func (l *loop) rebalance(ctx context.Context, wanted, count int, now time.Time) {
	cctx, cancel := context.WithTimeout(ctx, l.r.callTimeout())
	listed := l.r.clock.Now()
	snap, err := l.r.mgr.Snapshot(cctx, count)
	cancel()
	l.noteCapacity()
	l.lastList = now
	if l.r.stats.count(err) != nil {
		// A listing that failed says nothing of how fast the store answers
		// (a call to a frozen store ends at its timeout): the failure
		// back-off paces the next try, so that a store that comes back is
		// listed within about a second, not four timeouts later.
		if isMissing(err) {
			l.noteLoss()
		}
		l.fail(ctx, "snapshot", err)
		return
	}
	moving := false // the quick pace below: the listing wait is bounded
	defer func() { l.paceListings(listed, moving) }()
	_, hold := snap.Demands[HoldOwner]
	demands := make(map[string]uint32, len(snap.Demands)+1)
	for o, d := range snap.Demands {
		if o != HoldOwner {
			demands[o] = d
		}
	}
	l.keepLapsed(demands, now)
	demands[l.r.owner] = uint32(wanted)
	held := len(l.table)
	moved := !maps.Equal(demands, l.demands)
	handover := now.Before(l.handoverUntil)
	promised := l.share
	l.demands = demands
	l.applyShares(count, demands, now)
	target := min(wanted, l.share)
	if handover && l.keepTurn {
		// The losers gave up their turns by the shares of the boundary;
		// a demand that changed since then moves the turns for the next
		// epoch, and meanwhile the turn this instance was handed is its own.
		target = max(target, min(wanted, promised))
	}
	l.releaseAbove(ctx, l.keepFloor(wanted), "above fair share")
	free := l.readPartitions(snap.Partitions)
	if hold || l.wiped {
		// After a data loss, partitions nobody re-took may still be
		// counted by an instance that has not noticed the loss yet.
		free = nil
	}
	order := acquireOrder(l.r.owner, free, l.homeLo, l.homeHi)
	if handover {
		order = placesFirst(order, free, l.gainLo, l.gainHi)
	}
	if !hold && !l.wiped {
		order = append(l.unsure(snap.Partitions), order...)
	}
	l.acquire(ctx, order[:min(max(target-len(l.table), 0), len(order))])
	// Keep the quick pace while anything moves: this instance is short of
	// its target, its holding changed, or some instance's demand changed. An
	// instance that just took every free partition must soon see the demand
	// of one that started at the same moment, or the other waits a whole
	// settled interval for its share. Settled instances list slowly, which is
	// what keeps full contention cheap.
	moving = true
	switch {
	case handover && len(l.table) < target:
		// The partitions a rotation frees come within milliseconds of
		// the boundary; look again soon rather than at the quick pace.
		l.listAt = now.Add(l.handoverWait)
		l.handoverWait = min(2*l.handoverWait, l.r.maxInterval/5)
	case len(l.table) < target || (len(l.table) != held && !handover) || moved:
		// A gain that completes a rotation's hand-over is expected by
		// every instance, and needs no second look.
		l.listAt = now.Add(l.r.jitter(0.5, 1))
	default:
		l.listAt = now.Add(l.r.jitter(1.5, 2.5))
		moving = false
	}
	if len(l.table) >= target {
		l.handoverUntil = time.Time{}
	}
	if l.provision {
		// The snapshot showed the store lost its data (see noteLoss): the
		// next pass, which provisions and re-takes, is due at once.
		l.listAt = now
	}
}

// keepLapsed adds to demands, read from a snapshot at now, the demands of
// the last snapshot whose records are gone, while the store is answering
// again after an outage (see lapseGrace).
func (l *loop) keepLapsed(demands map[string]uint32, now time.Time) {
	if l.failures > 0 && !l.listedOK.IsZero() && now.Sub(l.listedOK) > l.r.leaseDuration/3 {
		l.graceUntil = now.Add(lapseGrace*l.r.maxInterval + reconnectGrace)
	}
	l.listedOK = now
	if !now.Before(l.graceUntil) {
		return
	}
	for o, d := range l.demands {
		if _, ok := demands[o]; !ok {
			demands[o] = d
		}
	}
}

// lapseGrace and reconnectGrace say how long an instance that lists again
// after an outage keeps the demands that lapsed meanwhile: lapseGrace
// maxIntervals plus reconnectGrace. A record lives one lease and is
// published again every third of one, so an outage longer than that lets
// the records of every instance lapse together; the first instance to list
// when the store answers again would find itself alone, take every free
// partition, and give most of them back a listing later, a fall of capacity
// after the recovery. The others retry on their back-off, at most
// 2 x maxInterval apart, and publish their demand first thing. But an
// instance's client may answer later than its store: go-redis, once its
// pool has failed to dial as many times as it has connections, fails every
// call at once and dials again only about every second, so an instance can
// be back a second after the others (TestSharedRecoversWhenAnInstanceReconnectsLate).
// For that long a record that lapsed is more likely an instance not yet
// back than one that is gone; one that is gone leaves its share unused for
// as long, once.
const (
	lapseGrace     = 2
	reconnectGrace = 2 * time.Second
)

// paceListings keeps the next listing at least listingSpacing times the
// last one's duration after it: a store that answers listings slowly, as an
// overloaded one does, gets fewer of them from every instance until it
// recovers, instead of the timeouts and retries that would overload it more.
// While things move at this instance (moving) it adds at most
// maxListingWait maxIntervals: when many instances start at once, the store
// answers slowly for a moment, and an instance that took more than its
// share before it saw the others' demands must list again soon to give it
// back. A listing of a few milliseconds leaves the pace as it was.
func (l *loop) paceListings(started time.Time, moving bool) {
	now := l.r.clock.Now()
	wait := listingSpacing * now.Sub(started)
	if moving {
		wait = min(wait, maxListingWait*l.r.maxInterval)
	}
	if soonest := now.Add(wait); l.listAt.Before(soonest) {
		l.listAt = soonest
	}
}

// listingSpacing is how many times a listing's duration the next one waits
// at least, and maxListingWait in maxIntervals the most that adds.
const (
	listingSpacing = 4
	maxListingWait = 2
)

// readPartitions returns the free partitions of a snapshot. A partition
// the table holds but the snapshot shows free or missing is no longer this
// instance's (the store lost it, or this clock ran slow): it stops counting
// at once, and is free to acquire again when it exists.
func (l *loop) readPartitions(states []lease.PartitionState) []int {
	var free []int
	for p, state := range states {
		if state == lease.PartitionLeased {
			continue
		}
		if hasPartition(l.table, p) {
			// Only a store that lost its data shows a valid lease of ours
			// free or missing: the lease ended no earlier than we count it.
			l.noteLoss()
		}
		if state == lease.PartitionMissing {
			l.provision = true
			continue
		}
		free = append(free, p)
	}
	return free
}

// noteLoss records that the store lost its data: partitions are missing,
// or a lease this instance validly holds shows free. The leases still valid
// keep counting, as no instance may take them until the hold is over (see
// HoldOwner); the next pass, due at once, publishes the hold, provisions
// the store again and re-takes them.
func (l *loop) noteLoss() {
	l.wiped, l.provision = true, true
	l.listAt = l.r.clock.Now()
}

// retake acquires again, after the store lost its data, the partitions
// whose leases this instance still counts; a lease that ran out meanwhile
// is dropped, and one that another instance holds (which the hold should
// make impossible) stops counting at once.
func (l *loop) retake(ctx context.Context) {
	now := l.r.clock.Now()
	var mine []int
	for _, p := range l.table.indexes() {
		if now.Before(l.table[p].validUntil) {
			mine = append(mine, p)
		} else {
			l.forget(p, "lease lost with the store's data")
		}
	}
	results := l.acquireCalls(ctx, mine)
	for _, res := range results {
		switch {
		case res.err == nil:
			l.table[res.partition] = newHeldLease(res.sent, l.r.leaseDuration)
		case isConflict(res.err):
			l.forget(res.partition, "taken by another instance after the store lost its data")
		default:
			l.fail(ctx, fmt.Sprintf("re-take partition %d", res.partition), res.err)
		}
	}
	l.publishView()
	// Re-taken partitions are allocated again at the store.
	for _, res := range results {
		if res.err == nil {
			l.r.stats.acquisitions.Add(1)
			l.r.emitLoop(AllocatedEvent, res.partition, "", nil)
		}
	}
}

// unsure returns the partitions whose acquire had an unknown outcome that
// states shows leased, in ascending order. The store may have granted such
// an acquire after the call gave up on it (a go-redis call to a frozen
// server times out, and the server runs it when it resumes): then this
// instance holds the lease without counting it, and nobody can take the
// partition until the lease runs out, a lease duration later. Acquiring it
// again settles the outcome at once: every store grants an acquire to the
// owner that holds the lease already (extending it) and refuses it to
// anyone else.
func (l *loop) unsure(states []lease.PartitionState) []int {
	var out []int
	for p, state := range states {
		if state == lease.PartitionLeased && l.uncertain[p] && !hasPartition(l.table, p) {
			out = append(out, p)
		}
	}
	return out
}

// hasPartition reports whether the table holds p.
func hasPartition(t leaseTable, p int) bool {
	_, ok := t[p]
	return ok
}

// shutdown gives everything back when the loop ends: it stops counting the
// leases, releases them (and partitions whose acquire had an unknown
// outcome), and withdraws the demand, within releaseTimeout.
func (l *loop) shutdown(ctx context.Context) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	held := l.table.indexes()
	l.release(cctx, held, "stopped")
	unsure := make([]int, 0, len(l.uncertain))
	for p := range l.uncertain {
		unsure = append(unsure, p)
	}
	// Best effort: a conflict only means the acquire had not won.
	l.releaseCalls(cctx, unsure)
	if l.published > 0 {
		if err := l.r.stats.count(l.r.mgr.PublishDemand(cctx, l.r.owner, 0, l.r.leaseDuration)); err != nil {
			l.fail(cctx, "withdraw demand", err)
		}
	}
	l.r.loopCapacity(l.r.reserved.Load())
}
