package leasetest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/costwise/batcher/lease"
	"github.com/costwise/batcher/leasetest"
	"github.com/costwise/batcher/sharing"
)

// TestFaultManager checks the injected failure, delay and lost answer, the
// swap to an empty store and the call count, over the memory manager.
func TestFaultManager(t *testing.T) {
	ctx := context.Background()
	m := leasetest.NewFaultManager(sharing.NewMemoryLeaseManager())
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
	// A frozen store: the delay runs first, and the failure it clears is
	// not reported.
	delayed := 0
	m.SetFailure(context.DeadlineExceeded)
	m.SetDelay(func(context.Context) {
		delayed++
		m.SetFailure(nil)
	})
	if err := m.Renew(ctx, 0, "a", time.Minute); err != nil || delayed != 1 {
		t.Fatalf("Renew with a delay that clears the failure: %v after %d delays, want nil after 1", err, delayed)
	}
	m.SetDelay(nil)
	// A lost answer: the acquire is carried out, its caller told it failed.
	m.SetLostAnswers(func(op string) error {
		if op == "Acquire" {
			return context.DeadlineExceeded
		}
		return nil
	})
	if err := m.Acquire(ctx, 1, "a", time.Minute); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with its answer lost: %v, want %v", err, context.DeadlineExceeded)
	}
	m.SetLostAnswers(nil)
	var conflict lease.ConflictError
	if err := m.Acquire(ctx, 1, "b", time.Minute); !errors.As(err, &conflict) {
		t.Fatalf("Acquire by b of the partition a's lost acquire took: %v, want ConflictError", err)
	}
	m.Swap(sharing.NewMemoryLeaseManager())
	snap, err := m.Snapshot(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range snap.Partitions {
		if s != lease.PartitionMissing {
			t.Fatalf("partition %d after Swap is %v, want missing", i, s)
		}
	}
	var missing lease.PartitionMissingError
	if err := m.Renew(ctx, 0, "a", time.Minute); !errors.As(err, &missing) {
		t.Fatalf("Renew after Swap: %v, want PartitionMissingError", err)
	}
	if got := m.Calls(); got != 10 {
		t.Fatalf("Calls() = %d, want 10", got)
	}
}
