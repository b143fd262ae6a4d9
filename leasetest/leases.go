package leasetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/costwise/batcher/lease"
)

// acquireConflict: a leased partition cannot be acquired by another owner,
// and the snapshot shows it leased.
func (s suite) acquireConflict(t *testing.T) {
	m := s.provisioned(t, 2)
	ctx := s.ctx(t)
	wantNoError(t, "Acquire(0, A)", m.Acquire(ctx, 0, ownerA, s.opts.LeaseDuration))
	wantConflict(t, "Acquire(0, B) while A holds it", m.Acquire(ctx, 0, ownerB, s.opts.LeaseDuration), 0)
	s.wantStates(t, m, "LF")
	wantNoError(t, "Acquire(1, B)", m.Acquire(ctx, 1, ownerB, s.opts.LeaseDuration))
	s.wantStates(t, m, "LL")
}

// acquireConcurrent: when many owners race for one free partition exactly
// one wins and every other gets a LeaseConflictError.
func (s suite) acquireConcurrent(t *testing.T) {
	const racers = 16
	m := s.provisioned(t, 1)
	ctx := s.ctx(t)
	errs := make([]error, racers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < racers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			errs[i] = m.Acquire(ctx, 0, owner(i), s.opts.LeaseDuration)
		}(i)
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		if err == nil {
			if winner >= 0 {
				t.Fatalf("owners %d and %d both acquired partition 0", winner, i)
			}
			winner = i
			continue
		}
		wantConflict(t, "losing concurrent Acquire", err, 0)
	}
	if winner < 0 {
		t.Fatal("no owner acquired the free partition")
	}
	// Only the winner holds it: it alone can renew it.
	wantNoError(t, "Renew by the winner", m.Renew(ctx, 0, owner(winner), s.opts.LeaseDuration))
	loser := (winner + 1) % racers
	wantConflict(t, "Renew by a loser", m.Renew(ctx, 0, owner(loser), s.opts.LeaseDuration), 0)
}

// acquireDistinct: owners acquiring different partitions at once all win.
func (s suite) acquireDistinct(t *testing.T) {
	const n = 4
	m := s.provisioned(t, n)
	ctx := s.ctx(t)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = m.Acquire(ctx, i, owner(i), s.opts.LeaseDuration)
		}(i)
	}
	wg.Wait()
	for _, err := range errs {
		wantNoError(t, "concurrent Acquire of distinct partitions", err)
	}
	s.wantStates(t, m, "LLLL")
}

// renewOnlyByOwner: the owner can renew; another owner, or an owner of a
// partition never leased, gets a LeaseConflictError and changes nothing.
func (s suite) renewOnlyByOwner(t *testing.T) {
	m := s.provisioned(t, 2)
	ctx := s.ctx(t)
	d := s.opts.LeaseDuration
	wantNoError(t, "Acquire(0, A)", m.Acquire(ctx, 0, ownerA, d))
	wantNoError(t, "Renew(0, A)", m.Renew(ctx, 0, ownerA, d))
	wantConflict(t, "Renew(0, B) of A's lease", m.Renew(ctx, 0, ownerB, d), 0)
	wantConflict(t, "Renew(1, A) of a partition never leased", m.Renew(ctx, 1, ownerA, d), 1)
	s.wantStates(t, m, "LF")
	wantConflict(t, "Acquire(0, B) after B's failed renew", m.Acquire(ctx, 0, ownerB, d), 0)
	wantNoError(t, "Renew(0, A) after B's failed renew", m.Renew(ctx, 0, ownerA, d))
}

// renewBatch: a manager that is a lease.BatchRenewer renews in one call
// what Renew would, partition by partition: its owner's leases, a conflict
// for another owner's lease or a partition never leased, a missing-partition
// error past the provisioned ones; and the renewed leases stay the owner's.
func (s suite) renewBatch(t *testing.T) {
	m := s.provisioned(t, 4)
	b, ok := m.(lease.BatchRenewer)
	if !ok {
		t.Skip("leasetest: the manager is not a lease.BatchRenewer")
	}
	ctx := s.ctx(t)
	d := s.opts.LeaseDuration
	wantNoError(t, "Acquire(0, A)", m.Acquire(ctx, 0, ownerA, d))
	wantNoError(t, "Acquire(1, B)", m.Acquire(ctx, 1, ownerB, d))
	wantNoError(t, "Acquire(3, A)", m.Acquire(ctx, 3, ownerA, d))
	results, err := b.RenewBatch(ctx, []int{0, 1, 2, 3, 7}, ownerA, d)
	wantNoError(t, "RenewBatch", err)
	if len(results) != 5 {
		t.Fatalf("RenewBatch of 5 partitions returned %d results", len(results))
	}
	wantNoError(t, "RenewBatch: A's lease on 0", results[0])
	wantConflict(t, "RenewBatch: B's lease on 1", results[1], 1)
	wantConflict(t, "RenewBatch: 2, never leased", results[2], 2)
	wantNoError(t, "RenewBatch: A's lease on 3", results[3])
	var missing lease.PartitionMissingError
	if !errors.As(results[4], &missing) || missing.Partition != 7 {
		t.Fatalf("RenewBatch: partition 7 of 4: %v, want a PartitionMissingError for 7", results[4])
	}
	s.wantStates(t, m, "LLFL")
	wantConflict(t, "Acquire(0, B) after A's batch renewal", m.Acquire(ctx, 0, ownerB, d), 0)
	wantNoError(t, "Renew(1, B) after A's batch renewal", m.Renew(ctx, 1, ownerB, d))
}

// acquireBatch: a manager that is a lease.BatchAcquirer acquires in one
// call what Acquire would, partition by partition: free partitions and the
// owner's own (extended), a conflict for another owner's lease, a
// missing-partition error past the provisioned ones.
func (s suite) acquireBatch(t *testing.T) {
	m := s.provisioned(t, 4)
	b, ok := m.(lease.BatchAcquirer)
	if !ok {
		t.Skip("leasetest: the manager is not a lease.BatchAcquirer")
	}
	ctx := s.ctx(t)
	d := s.opts.LeaseDuration
	wantNoError(t, "Acquire(1, B)", m.Acquire(ctx, 1, ownerB, d))
	wantNoError(t, "Acquire(3, A)", m.Acquire(ctx, 3, ownerA, d))
	results, err := b.AcquireBatch(ctx, []int{0, 1, 3, 9}, ownerA, d)
	wantNoError(t, "AcquireBatch", err)
	if len(results) != 4 {
		t.Fatalf("AcquireBatch of 4 partitions returned %d results", len(results))
	}
	wantNoError(t, "AcquireBatch: free 0", results[0])
	wantConflict(t, "AcquireBatch: B's lease on 1", results[1], 1)
	wantNoError(t, "AcquireBatch: A's own lease on 3", results[2])
	var missing lease.PartitionMissingError
	if !errors.As(results[3], &missing) || missing.Partition != 9 {
		t.Fatalf("AcquireBatch: partition 9 of 4: %v, want a PartitionMissingError for 9", results[3])
	}
	s.wantStates(t, m, "LLFL")
	wantConflict(t, "Acquire(0, B) after A's batch", m.Acquire(ctx, 0, ownerB, d), 0)
	wantNoError(t, "Renew(0, A) after A's batch", m.Renew(ctx, 0, ownerA, d))
	wantNoError(t, "Renew(1, B) after A's batch", m.Renew(ctx, 1, ownerB, d))
}

// releaseBatch: a manager that is a lease.BatchReleaser releases in one
// call what Release would: the owner's leases, which are free at once, and
// a conflict for another owner's lease or a partition never leased.
func (s suite) releaseBatch(t *testing.T) {
	m := s.provisioned(t, 4)
	b, ok := m.(lease.BatchReleaser)
	if !ok {
		t.Skip("leasetest: the manager is not a lease.BatchReleaser")
	}
	ctx := s.ctx(t)
	d := s.opts.LeaseDuration
	wantNoError(t, "Acquire(0, A)", m.Acquire(ctx, 0, ownerA, d))
	wantNoError(t, "Acquire(1, B)", m.Acquire(ctx, 1, ownerB, d))
	wantNoError(t, "Acquire(3, A)", m.Acquire(ctx, 3, ownerA, d))
	results, err := b.ReleaseBatch(ctx, []int{0, 1, 2, 3}, ownerA)
	wantNoError(t, "ReleaseBatch", err)
	if len(results) != 4 {
		t.Fatalf("ReleaseBatch of 4 partitions returned %d results", len(results))
	}
	wantNoError(t, "ReleaseBatch: A's lease on 0", results[0])
	wantConflict(t, "ReleaseBatch: B's lease on 1", results[1], 1)
	wantConflict(t, "ReleaseBatch: 2, never leased", results[2], 2)
	wantNoError(t, "ReleaseBatch: A's lease on 3", results[3])
	s.wantStates(t, m, "FLFF")
	wantNoError(t, "Acquire(3, C) right after the batch release", m.Acquire(ctx, 3, ownerC, d))
	wantConflict(t, "Renew(0, A) after releasing it", m.Renew(ctx, 0, ownerA, d), 0)
}

// releaseOnlyByOwner: another owner cannot release a lease; the lease stays.
func (s suite) releaseOnlyByOwner(t *testing.T) {
	m := s.provisioned(t, 2)
	ctx := s.ctx(t)
	d := s.opts.LeaseDuration
	wantNoError(t, "Acquire(0, A)", m.Acquire(ctx, 0, ownerA, d))
	wantConflict(t, "Release(0, B) of A's lease", m.Release(ctx, 0, ownerB), 0)
	wantConflict(t, "Release(1, A) of a partition never leased", m.Release(ctx, 1, ownerA), 1)
	s.wantStates(t, m, "LF")
	wantConflict(t, "Acquire(0, C) after B's failed release", m.Acquire(ctx, 0, ownerC, d), 0)
	wantNoError(t, "Renew(0, A) after B's failed release", m.Renew(ctx, 0, ownerA, d))
}

// releaseFrees: after its owner releases it, a partition is free at once:
// the snapshot shows it free and another owner acquires it without waiting,
// while the former owner can no longer renew or release it.
func (s suite) releaseFrees(t *testing.T) {
	m := s.provisioned(t, 2)
	ctx := s.ctx(t)
	d := s.opts.LeaseDuration
	wantNoError(t, "Acquire(0, A)", m.Acquire(ctx, 0, ownerA, d))
	wantNoError(t, "Acquire(1, A)", m.Acquire(ctx, 1, ownerA, d))
	wantNoError(t, "Release(0, A)", m.Release(ctx, 0, ownerA))
	s.wantStates(t, m, "FL")
	wantNoError(t, "Acquire(0, B) right after A released it", m.Acquire(ctx, 0, ownerB, d))
	wantConflict(t, "Renew(0, A) after B took it", m.Renew(ctx, 0, ownerA, d), 0)
	wantConflict(t, "Release(0, A) after B took it", m.Release(ctx, 0, ownerA), 0)
	s.wantStates(t, m, "LL")
}

// demands: published demands are live in the snapshot, a new value replaces
// the old one, and zero withdraws the record.
func (s suite) demands(t *testing.T) {
	m := s.provisioned(t, 2)
	ctx := s.ctx(t)
	ttl := 10 * s.opts.LeaseDuration
	wantNoError(t, "PublishDemand(A, 3)", m.PublishDemand(ctx, ownerA, 3, ttl))
	wantNoError(t, "PublishDemand(B, 2)", m.PublishDemand(ctx, ownerB, 2, ttl))
	s.wantDemands(t, m, 2, map[string]uint32{ownerA: 3, ownerB: 2})
	wantNoError(t, "PublishDemand(A, 1)", m.PublishDemand(ctx, ownerA, 1, ttl))
	s.wantDemands(t, m, 2, map[string]uint32{ownerA: 1, ownerB: 2})
	wantNoError(t, "PublishDemand(A, 0)", m.PublishDemand(ctx, ownerA, 0, ttl))
	s.wantDemands(t, m, 2, map[string]uint32{ownerB: 2})
	wantNoError(t, "PublishDemand(B, 0)", m.PublishDemand(ctx, ownerB, 0, ttl))
	s.wantDemands(t, m, 2, nil)
}

// demandWithdrawUnknown: withdrawing a demand that was never published is
// not an error.
func (s suite) demandWithdrawUnknown(t *testing.T) {
	m := s.provisioned(t, 1)
	wantNoError(t, "PublishDemand(C, 0) never published", m.PublishDemand(s.ctx(t), ownerC, 0, time.Minute))
	s.wantDemands(t, m, 1, nil)
}

// contextErrors: a cancelled context makes every call fail with an error
// that is (or wraps) context.Canceled, and changes nothing.
func (s suite) contextErrors(t *testing.T) {
	m := s.provisioned(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d := s.opts.LeaseDuration
	calls := map[string]error{
		"Acquire":       m.Acquire(ctx, 0, ownerA, d),
		"Renew":         m.Renew(ctx, 0, ownerA, d),
		"Release":       m.Release(ctx, 0, ownerA),
		"PublishDemand": m.PublishDemand(ctx, ownerA, 1, time.Minute),
		"Provision":     m.Provision(ctx, 1, nil),
	}
	_, calls["Snapshot"] = m.Snapshot(ctx, 1)
	for name, err := range calls {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v, want an error matching context.Canceled", name, err)
		}
	}
	s.wantStates(t, m, "F")
	s.wantDemands(t, m, 1, nil)
}

// leaseExpires: a lease that is not renewed ends after its duration; then
// the partition is free, another owner can take it, and the former owner
// can no longer renew or release it.
func (s suite) leaseExpires(t *testing.T) {
	m := s.provisioned(t, 1)
	ctx := s.ctx(t)
	d := s.opts.ExpiryLeaseDuration
	wantNoError(t, "Acquire(0, A)", m.Acquire(ctx, 0, ownerA, d))
	s.opts.Wait(m, d+s.opts.Slack)
	s.wantStates(t, m, "F")
	wantNoError(t, "Acquire(0, B) after A's lease expired", m.Acquire(ctx, 0, ownerB, d))
	wantConflict(t, "Renew(0, A) after B took the expired lease", m.Renew(ctx, 0, ownerA, d), 0)
	wantConflict(t, "Release(0, A) after B took the expired lease", m.Release(ctx, 0, ownerA), 0)
	s.wantStates(t, m, "L")
}

// renewExtends: a renewed lease outlives its first term.
func (s suite) renewExtends(t *testing.T) {
	m := s.provisioned(t, 1)
	ctx := s.ctx(t)
	d := s.opts.ExpiryLeaseDuration
	if s.opts.Slack >= d/2 {
		t.Skipf("leasetest: Slack %v must be under half of ExpiryLeaseDuration %v", s.opts.Slack, d)
	}
	wantNoError(t, "Acquire(0, A)", m.Acquire(ctx, 0, ownerA, d))
	s.opts.Wait(m, d/2)
	wantNoError(t, "Renew(0, A) halfway", m.Renew(ctx, 0, ownerA, d))
	// Now past the first term and well before the renewed one ends.
	s.opts.Wait(m, d/2+s.opts.Slack)
	s.wantStates(t, m, "L")
	wantConflict(t, "Acquire(0, B) of the renewed lease", m.Acquire(ctx, 0, ownerB, d), 0)
}

// demandLapses: a demand not published again within its ttl disappears,
// while one with a longer ttl stays.
func (s suite) demandLapses(t *testing.T) {
	m := s.provisioned(t, 1)
	ctx := s.ctx(t)
	ttl := s.opts.DemandTTL
	wantNoError(t, "PublishDemand(A, 2, ttl)", m.PublishDemand(ctx, ownerA, 2, ttl))
	wantNoError(t, "PublishDemand(B, 1, long ttl)", m.PublishDemand(ctx, ownerB, 1, 100*ttl+time.Minute))
	s.wantDemands(t, m, 1, map[string]uint32{ownerA: 2, ownerB: 1})
	s.opts.Wait(m, ttl+s.opts.Slack)
	s.wantDemands(t, m, 1, map[string]uint32{ownerB: 1})
	// Publishing again brings the record back.
	wantNoError(t, "PublishDemand(A, 4, ttl) again", m.PublishDemand(ctx, ownerA, 4, ttl))
	s.wantDemands(t, m, 1, map[string]uint32{ownerA: 4, ownerB: 1})
}
