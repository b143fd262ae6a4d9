package batcher_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/batchertest"
	"github.com/costwise/batcher/leasetest"
)

// These tests check the shared-capacity section of docs/batcher.md from the
// outside, through the package batcher names a user calls.

// TestPromiseSharedDefaultLeaseDuration checks, with nothing but the
// defaults of NewSharedResource, the table's "WithLeaseDuration(d) | 15 s"
// and "WithFactor(f) | 1", and the rule that a lease counts as capacity only
// until the moment its request was sent + lease duration − max(2 s, 10 %),
// i.e. 13 s with the default lease ("13 s with the default 15 s lease"):
// with the store unreachable right after the acquisition, Capacity stays at
// the full value up to 12.999 s and falls to the reserved capacity at 13 s,
// while the store itself keeps the lease until exactly 15 s.
func TestPromiseSharedDefaultLeaseDuration(t *testing.T) {
	start := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	fake := batchertest.NewFakeClock(start)
	store := batcher.NewMemoryLeaseManager().WithClock(fake)
	faults := leasetest.NewFaultManager(store)
	const shared, reserved = 4, 1
	r := batcher.NewSharedResource(faults, shared).WithReservedCapacity(reserved).WithClock(fake)
	ctx := startShared(t, r)

	if got := r.Stats().Partitions; got != shared {
		t.Fatalf("default factor: %d partitions for shared capacity %d, want %d (factor 1)", got, shared, shared)
	}
	r.GiveMe(shared + reserved)
	// The fake clock does not move while the loop acquires, so every
	// acquisition is sent at start.
	waitFor(t, "full capacity", func() bool { return r.Capacity() == shared+reserved })
	waitFor(t, "all partitions leased", func() bool { return r.Stats().Held == shared })
	if now := fake.Now(); !now.Equal(start) {
		t.Fatalf("the fake clock moved to %v on its own", now)
	}

	// From now on the store does not answer this instance.
	faults.SetFailure(errors.New("store unreachable"))

	fake.Set(start.Add(13*time.Second - time.Millisecond))
	if got := r.Capacity(); got != shared+reserved {
		t.Fatalf("at 12.999 s with the default lease, Capacity() = %d, want %d (leases still valid)", got, shared+reserved)
	}
	fake.Set(start.Add(13 * time.Second))
	if got := r.Capacity(); got != reserved {
		t.Fatalf("at 13 s with the default lease, Capacity() = %d, want the reserved %d "+
			"(15 s lease − 2 s margin)", got, reserved)
	}

	// The store keeps the leases for the default 15 s.
	fake.Set(start.Add(15*time.Second - time.Millisecond))
	if err := store.Acquire(ctx, 0, "someone-else", time.Minute); err == nil {
		t.Fatal("another owner acquired partition 0 at 14.999 s: the default lease is shorter than 15 s")
	}
	fake.Set(start.Add(15 * time.Second))
	for p := 0; p < shared; p++ {
		if err := store.Acquire(ctx, p, "someone-else", time.Minute); err != nil {
			t.Fatalf("partition %d still leased at 15 s (%v): the default lease is longer than 15 s", p, err)
		}
	}
}

// startShared provisions and starts r, stopped when the test ends, and
// returns the context it runs in.
func startShared(t *testing.T, r *batcher.SharedResource) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := r.Provision(ctx); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(r.Stop)
	return ctx
}

// TestPromiseReadmeSharedOneLiner runs README's in-process shared resource
// as written: 20,000 in 20 partitions of 1,000, all held by a lone
// instance that asks for them. Without the factor the line would need
// 20,000 partitions, which Provision refuses (at most 500): the README once
// showed it so.
func TestPromiseReadmeSharedOneLiner(t *testing.T) {
	r := batcher.NewSharedResource(batcher.NewMemoryLeaseManager(), 20000).WithFactor(1000)
	startShared(t, r)
	if got := r.Stats().Partitions; got != 20 {
		t.Fatalf("%d partitions, want 20", got)
	}
	r.GiveMe(20000)
	waitFor(t, "capacity 20000", func() bool { return r.Capacity() == 20000 })
	var tooMany batcher.PartitionsOutOfRangeError
	err := batcher.NewSharedResource(batcher.NewMemoryLeaseManager(), 20000).Provision(context.Background())
	if !errors.As(err, &tooMany) {
		t.Fatalf("factor 1: Provision = %v, want PartitionsOutOfRangeError", err)
	}
}
