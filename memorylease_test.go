package batcher_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/internal/clock"
	"github.com/costwise/batcher/leasetest"
)

// TestMemoryLeaseConformance runs the LeaseManager suite against the memory
// manager with a fake clock, so the expiry subtests take no real time.
func TestMemoryLeaseConformance(t *testing.T) {
	var mu sync.Mutex
	clocks := map[batcher.LeaseManager]*clock.Fake{}
	newManager := func(t *testing.T) batcher.LeaseManager {
		fake := clock.NewFake(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
		m := batcher.NewMemoryLeaseManager().WithClock(fake)
		mu.Lock()
		clocks[m] = fake
		mu.Unlock()
		return m
	}
	leasetest.RunWithOptions(t, newManager, leasetest.Options{
		Slack: time.Nanosecond,
		Wait: func(m batcher.LeaseManager, d time.Duration) {
			mu.Lock()
			fake := clocks[m]
			mu.Unlock()
			fake.Advance(d)
		},
	})
}

// TestMemoryLeaseConformanceRealClock runs the suite with the system clock
// and short leases, as a store that cannot be driven by hand would.
func TestMemoryLeaseConformanceRealClock(t *testing.T) {
	leasetest.RunWithOptions(t, func(t *testing.T) batcher.LeaseManager {
		return batcher.NewMemoryLeaseManager()
	}, leasetest.Options{
		ExpiryLeaseDuration: 200 * time.Millisecond,
		DemandTTL:           100 * time.Millisecond,
		Slack:               50 * time.Millisecond,
	})
}

// TestMemoryLeaseFailureAndReset checks the fault-injection test aids.
func TestMemoryLeaseFailureAndReset(t *testing.T) {
	ctx := context.Background()
	m := batcher.NewMemoryLeaseManager()
	if err := m.Provision(ctx, 2, nil); err != nil {
		t.Fatal(err)
	}
	if err := m.Acquire(ctx, 0, "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("throttled")
	m.SetFailure(boom)
	if _, err := m.Snapshot(ctx, 2); !errors.Is(err, boom) {
		t.Fatalf("Snapshot with a failure set: %v, want %v", err, boom)
	}
	if err := m.Renew(ctx, 0, "a", time.Minute); !errors.Is(err, boom) {
		t.Fatalf("Renew with a failure set: %v, want %v", err, boom)
	}
	m.SetFailure(nil)
	if err := m.Renew(ctx, 0, "a", time.Minute); err != nil {
		t.Fatalf("Renew after clearing the failure: %v", err)
	}
	m.Reset()
	snap, err := m.Snapshot(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range snap.Partitions {
		if s != batcher.PartitionMissing {
			t.Fatalf("partition %d after Reset is %v, want missing", i, s)
		}
	}
	var missing batcher.PartitionMissingError
	if err := m.Renew(ctx, 0, "a", time.Minute); !errors.As(err, &missing) {
		t.Fatalf("Renew after Reset: %v, want PartitionMissingError", err)
	}
	if got := m.Calls(); got != 7 {
		t.Fatalf("Calls() = %d, want 7", got)
	}
}
