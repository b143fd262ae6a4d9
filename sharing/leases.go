package sharing

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/costwise/batcher/lease"
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

// each calls call for every partition, at most maxParallel at a time, each
// with its own timeout, and returns when all have returned. The goroutines
// it starts end before it returns. A panicking lease.Manager becomes an
// error rather than a crash.
func (r *Resource) each(ctx context.Context, partitions []int, call func(context.Context, int) error) []callResult {
	results := make([]callResult, len(partitions))
	sem := make(chan struct{}, maxParallel)
	var wg sync.WaitGroup
	for k, p := range partitions {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, r.callTimeout())
			defer cancel()
			results[k] = callResult{partition: p, sent: r.clock.Now()}
			results[k].err = r.stats.count(guard(func() error { return call(cctx, p) }))
		}()
	}
	wg.Wait()
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
func (r *Resource) forget(st *loopState, p int, why string) {
	delete(st.table, p)
	r.publishView(st)
	r.stats.releases.Add(1)
	r.emitLoop(ReleasedEvent, p, why, nil)
}

// isConflict reports whether err is a lease.ConflictError.
func isConflict(err error) bool {
	var conflict lease.ConflictError
	return errors.As(err, &conflict)
}

// dropLost forgets leases that surely ended at the store (their renewal
// kept failing) and gives up partitions beyond count (the shared capacity
// shrank).
func (r *Resource) dropLost(ctx context.Context, st *loopState, now time.Time, count int) {
	for _, p := range st.table.expired(now) {
		r.forget(st, p, "lease expired before it could be renewed")
	}
	var beyond []int
	for _, p := range st.table.indexes() {
		if p >= count {
			beyond = append(beyond, p)
		}
	}
	r.release(ctx, st, beyond, "partition beyond the shared capacity")
}

// releaseAbove gives up the leases beyond target, those others prefer
// first.
func (r *Resource) releaseAbove(ctx context.Context, st *loopState, target int, why string) {
	excess := len(st.table) - max(target, 0)
	if excess <= 0 {
		return
	}
	order := releaseOrder(r.owner, st.table.indexes(), st.homeLo, st.homeHi)
	r.release(ctx, st, order[:excess], why)
}

// release gives up partitions. They stop counting as capacity before the
// store is asked to end their leases, so this instance never counts a
// partition another may already have taken.
func (r *Resource) release(ctx context.Context, st *loopState, partitions []int, why string) {
	if len(partitions) == 0 {
		return
	}
	for _, p := range partitions {
		delete(st.table, p)
	}
	r.publishView(st)
	r.loopCapacity(r.Capacity())
	results := r.each(ctx, partitions, func(cctx context.Context, p int) error {
		return r.mgr.Release(cctx, p, r.owner)
	})
	for _, res := range results {
		r.stats.releases.Add(1)
		r.emitLoop(ReleasedEvent, res.partition, why, nil)
		// A conflict means the lease had already ended; any other error
		// leaves it to expire at the store, which is safe, but is worth
		// reporting.
		if res.err != nil && !isConflict(res.err) {
			r.fail(ctx, st, fmt.Sprintf("release partition %d", res.partition), res.err)
		}
	}
}

// renewDue renews the leases whose renewal time has come. A lease lost to
// a conflict is dropped at once; one whose renewal failed otherwise is kept
// (it may still be ours) and retried until it expires.
func (r *Resource) renewDue(ctx context.Context, st *loopState, now time.Time) {
	due := st.table.dueForRenewal(now)
	if len(due) == 0 {
		return
	}
	results := r.each(ctx, due, func(cctx context.Context, p int) error {
		return r.mgr.Renew(cctx, p, r.owner, r.leaseDuration)
	})
	for _, res := range results {
		switch {
		case res.err == nil:
			st.table[res.partition] = newHeldLease(res.sent, r.leaseDuration)
			r.stats.renewals.Add(1)
		case isMissing(res.err):
			r.noteLoss(st)
		case isConflict(res.err):
			r.forget(st, res.partition, "lease lost")
		default:
			r.fail(ctx, st, fmt.Sprintf("renew partition %d", res.partition), res.err)
		}
	}
	r.publishView(st)
}

// acquire tries to lease partitions and adds those won to the table.
func (r *Resource) acquire(ctx context.Context, st *loopState, partitions []int) {
	if len(partitions) == 0 {
		return
	}
	results := r.each(ctx, partitions, func(cctx context.Context, p int) error {
		return r.mgr.Acquire(cctx, p, r.owner, r.leaseDuration)
	})
	for _, res := range results {
		switch {
		case res.err == nil:
			st.table[res.partition] = newHeldLease(res.sent, r.leaseDuration)
			delete(st.uncertain, res.partition)
		case isConflict(res.err):
			r.emitLoop(FailedEvent, res.partition, "", nil)
		default:
			// The store may have granted the lease before the call failed;
			// Stop releases such partitions in case.
			st.uncertain[res.partition] = true
			r.fail(ctx, st, fmt.Sprintf("acquire partition %d", res.partition), res.err)
		}
	}
	r.publishView(st)
	for _, res := range results {
		if res.err == nil {
			r.stats.acquisitions.Add(1)
			r.emitLoop(AllocatedEvent, res.partition, "", nil)
		}
	}
}

// rebalance reads a snapshot, computes this instance's fair share, gives
// back what is above it and acquires free partitions up to it.
func (r *Resource) rebalance(ctx context.Context, st *loopState, wanted, count int, now time.Time) {
	cctx, cancel := context.WithTimeout(ctx, r.callTimeout())
	snap, err := r.mgr.Snapshot(cctx, count)
	cancel()
	st.lastList = now
	if r.stats.count(err) != nil {
		if isMissing(err) {
			r.noteLoss(st)
		}
		r.fail(ctx, st, "snapshot", err)
		return
	}
	_, hold := snap.Demands[HoldOwner]
	demands := make(map[string]uint32, len(snap.Demands)+1)
	for o, d := range snap.Demands {
		if o != HoldOwner {
			demands[o] = d
		}
	}
	demands[r.owner] = uint32(wanted)
	held := len(st.table)
	moved := !maps.Equal(demands, st.demands)
	st.demands = demands
	shares := fairShares(count, demands)
	st.share = shares[r.owner]
	st.homeLo, st.homeHi = homeRange(r.owner, shares)
	target := min(wanted, st.share)
	r.releaseAbove(ctx, st, target, "above fair share")
	free := r.readPartitions(st, snap.Partitions)
	if hold || st.wiped {
		// After a data loss, partitions nobody re-took may still be
		// counted by an instance that has not noticed the loss yet.
		free = nil
	}
	order := acquireOrder(r.owner, free, st.homeLo, st.homeHi)
	r.acquire(ctx, st, order[:min(max(target-len(st.table), 0), len(order))])
	// Keep the quick pace while anything moves: this instance is short of
	// its target, its holding changed, or some instance's demand changed. An
	// instance that just took every free partition must soon see the demand
	// of one that started at the same moment, or the other waits a whole
	// settled interval for its share. Settled instances list slowly, which is
	// what keeps full contention cheap.
	if len(st.table) < target || len(st.table) != held || moved {
		st.listAt = now.Add(r.jitter(0.5, 1))
	} else {
		st.listAt = now.Add(r.jitter(1.5, 2.5))
	}
}

// readPartitions returns the free partitions of a snapshot. A partition
// the table holds but the snapshot shows free or missing is no longer this
// instance's (the store lost it, or this clock ran slow): it stops counting
// at once, and is free to acquire again when it exists.
func (r *Resource) readPartitions(st *loopState, states []lease.PartitionState) []int {
	var free []int
	for p, state := range states {
		if state == lease.PartitionLeased {
			continue
		}
		if hasPartition(st.table, p) {
			// Only a store that lost its data shows a valid lease of ours
			// free or missing: the lease ended no earlier than we count it.
			r.noteLoss(st)
		}
		if state == lease.PartitionMissing {
			st.provision = true
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
func (r *Resource) noteLoss(st *loopState) {
	st.wiped, st.provision = true, true
	st.listAt = r.clock.Now()
}

// retake acquires again, after the store lost its data, the partitions
// whose leases this instance still counts; a lease that ran out meanwhile
// is dropped, and one that another instance holds (which the hold should
// make impossible) stops counting at once.
func (r *Resource) retake(ctx context.Context, st *loopState) {
	now := r.clock.Now()
	var mine []int
	for _, p := range st.table.indexes() {
		if now.Before(st.table[p].validUntil) {
			mine = append(mine, p)
		} else {
			r.forget(st, p, "lease lost with the store's data")
		}
	}
	results := r.each(ctx, mine, func(cctx context.Context, p int) error {
		return r.mgr.Acquire(cctx, p, r.owner, r.leaseDuration)
	})
	for _, res := range results {
		switch {
		case res.err == nil:
			st.table[res.partition] = newHeldLease(res.sent, r.leaseDuration)
		case isConflict(res.err):
			r.forget(st, res.partition, "taken by another instance after the store lost its data")
		default:
			r.fail(ctx, st, fmt.Sprintf("re-take partition %d", res.partition), res.err)
		}
	}
	r.publishView(st)
	// Re-taken partitions are allocated again at the store.
	for _, res := range results {
		if res.err == nil {
			r.stats.acquisitions.Add(1)
			r.emitLoop(AllocatedEvent, res.partition, "", nil)
		}
	}
}

// hasPartition reports whether the table holds p.
func hasPartition(t leaseTable, p int) bool {
	_, ok := t[p]
	return ok
}

// shutdown gives everything back when the loop ends: it stops counting the
// leases, releases them (and partitions whose acquire had an unknown
// outcome), and withdraws the demand, within releaseTimeout.
func (r *Resource) shutdown(ctx context.Context, st *loopState) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	held := st.table.indexes()
	r.release(cctx, st, held, "stopped")
	unsure := make([]int, 0, len(st.uncertain))
	for p := range st.uncertain {
		unsure = append(unsure, p)
	}
	// Best effort: a conflict only means the acquire had not won.
	r.each(cctx, unsure, func(c context.Context, p int) error { return r.mgr.Release(c, p, r.owner) })
	if st.published > 0 {
		if err := r.stats.count(r.mgr.PublishDemand(cctx, r.owner, 0, r.leaseDuration)); err != nil {
			r.fail(cctx, st, "withdraw demand", err)
		}
	}
	r.loopCapacity(r.reserved.Load())
}
