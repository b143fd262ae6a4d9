package leasetest

import (
	"errors"
	"sync"
	"testing"

	"github.com/costwise/batcher/lease"
)

// provisionCreates: a first Provision creates every partition, reports each
// one created exactly once, and leaves them free.
func (s suite) provisionCreates(t *testing.T) {
	m := s.newManager(t)
	var rec recorder
	wantNoError(t, "Provision(3)", m.Provision(s.ctx(t), 3, rec.report))
	created, verified := rec.blobCounts()
	for i := 0; i < 3; i++ {
		if created[i] != 1 || verified[i] != 0 {
			t.Fatalf("partition %d: reported created %d and verified %d times, want created once",
				i, created[i], verified[i])
		}
	}
	if len(created) != 3 || len(verified) != 0 {
		t.Fatalf("reports for partitions %v / %v, want only 0..2 created", created, verified)
	}
	if n := rec.count(lease.CreatedContainerEvent) + rec.count(lease.VerifiedContainerEvent); n > 1 {
		t.Fatalf("%d container reports, want at most one", n)
	}
	s.wantStates(t, m, "FFF")
	s.wantDemands(t, m, 3, nil)
}

// provisionIdempotent: provisioning again verifies everything and creates
// nothing.
func (s suite) provisionIdempotent(t *testing.T) {
	m := s.provisioned(t, 3)
	var rec recorder
	wantNoError(t, "second Provision(3)", m.Provision(s.ctx(t), 3, rec.report))
	created, verified := rec.blobCounts()
	if len(created) != 0 {
		t.Fatalf("second Provision created partitions %v, want none", created)
	}
	for i := 0; i < 3; i++ {
		if verified[i] != 1 {
			t.Fatalf("partition %d verified %d times, want once", i, verified[i])
		}
	}
	if rec.count(lease.CreatedContainerEvent) != 0 {
		t.Fatal("second Provision reported the container created")
	}
	s.wantStates(t, m, "FFF")
}

// provisionGrows: provisioning a larger count creates only the new
// partitions.
func (s suite) provisionGrows(t *testing.T) {
	m := s.provisioned(t, 2)
	var rec recorder
	wantNoError(t, "Provision(4)", m.Provision(s.ctx(t), 4, rec.report))
	created, verified := rec.blobCounts()
	if created[2] != 1 || created[3] != 1 || len(created) != 2 {
		t.Fatalf("Provision(4) after Provision(2) created %v, want exactly 2 and 3", created)
	}
	if verified[0] != 1 || verified[1] != 1 || len(verified) != 2 {
		t.Fatalf("Provision(4) after Provision(2) verified %v, want exactly 0 and 1", verified)
	}
	s.wantStates(t, m, "FFFF")
}

// provisionConcurrent: many instances provisioning at once all succeed and
// each partition is created exactly once.
func (s suite) provisionConcurrent(t *testing.T) {
	const instances, count = 8, 5
	m := s.newManager(t)
	var rec recorder
	errs := make([]error, instances)
	var wg sync.WaitGroup
	ctx := s.ctx(t)
	for i := 0; i < instances; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = m.Provision(ctx, count, rec.report)
		}(i)
	}
	wg.Wait()
	for _, err := range errs {
		wantNoError(t, "concurrent Provision", err)
	}
	created, verified := rec.blobCounts()
	for i := 0; i < count; i++ {
		if created[i] != 1 {
			t.Fatalf("partition %d reported created %d times by %d concurrent Provisions, want once",
				i, created[i], instances)
		}
		if created[i]+verified[i] != instances {
			t.Fatalf("partition %d reported %d times, want once per Provision (%d)",
				i, created[i]+verified[i], instances)
		}
	}
	if n := rec.count(lease.CreatedContainerEvent); n > 1 {
		t.Fatalf("container reported created %d times, want at most once", n)
	}
	s.wantStates(t, m, "FFFFF")
}

// provisionKeepsLeases: provisioning again leaves existing leases alone.
func (s suite) provisionKeepsLeases(t *testing.T) {
	m := s.provisioned(t, 2)
	ctx := s.ctx(t)
	wantNoError(t, "Acquire(0, A)", m.Acquire(ctx, 0, ownerA, s.opts.LeaseDuration))
	wantNoError(t, "Provision(2) again", m.Provision(ctx, 2, nil))
	s.wantStates(t, m, "LF")
	wantConflict(t, "Acquire(0, B) after re-provisioning", m.Acquire(ctx, 0, ownerB, s.opts.LeaseDuration), 0)
	wantNoError(t, "Renew(0, A) after re-provisioning", m.Renew(ctx, 0, ownerA, s.opts.LeaseDuration))
}

// snapshotBeforeProvision: an empty store shows every partition missing,
// either as states or as a PartitionMissingError.
func (s suite) snapshotBeforeProvision(t *testing.T) {
	m := s.newManager(t)
	snap, err := m.Snapshot(s.ctx(t), 3)
	if err != nil {
		var missing lease.PartitionMissingError
		if !errors.As(err, &missing) {
			t.Fatalf("Snapshot on an empty store: %v, want nil or a PartitionMissingError", err)
		}
		return
	}
	if got := stateString(snap.Partitions); got != "MMM" {
		t.Fatalf("Snapshot on an empty store = %s, want MMM", got)
	}
}

// snapshotPastProvisioned: partitions beyond those provisioned are missing.
func (s suite) snapshotPastProvisioned(t *testing.T) {
	m := s.provisioned(t, 2)
	s.wantStates(t, m, "FFMM")
}

// acquireMissing: acquiring a partition that does not exist fails with a
// PartitionMissingError for it.
func (s suite) acquireMissing(t *testing.T) {
	m := s.provisioned(t, 2)
	err := m.Acquire(s.ctx(t), 2, ownerA, s.opts.LeaseDuration)
	wantMissing(t, "Acquire(2) with two partitions", err, 2)
	s.wantStates(t, m, "FFM")
}
