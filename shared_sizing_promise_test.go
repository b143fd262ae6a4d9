package batcher_test

import (
	"testing"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/batchertest"
)

// spLastVal returns the val of the last recorded event named name, or -1.
func spLastVal(rec *batchertest.Recorder, name string) int {
	evs := rec.Named(name)
	if len(evs) == 0 {
		return -1
	}
	return evs[len(evs)-1].Val
}

// TestPromiseSharedSizingAndReservedAtRunTime checks, with a factor above 1
// and a reserved capacity, the sentences "Capacity() = validly held
// partitions × factor + reserved; MaxCapacity() = shared + reserved;
// GiveMe(target) asks for ceil((target − reserved)/factor) partitions",
// the target event ("partitions wanted"), and that SetReservedCapacity
// changes the reserved capacity at run time: MaxCapacity and Capacity
// follow at once, a capacity event carries the new capacity, and later
// requests are sized with the new reserved capacity.
func TestPromiseSharedSizingAndReservedAtRunTime(t *testing.T) {
	const shared, factor, reserved = 1000, 100, 50
	rec := batchertest.NewRecorder()
	r := batcher.NewSharedResource(batcher.NewMemoryLeaseManager(), shared).
		WithFactor(factor).WithReservedCapacity(reserved).WithMaxInterval(20)
	r.AddListener(rec.Listener())
	startShared(t, r)
	if got := r.MaxCapacity(); got != shared+reserved {
		t.Fatalf("MaxCapacity() = %d, want shared + reserved = %d", got, shared+reserved)
	}
	if got := r.Stats().Partitions; got != shared/factor {
		t.Fatalf("%d partitions, want ceil(%d/%d) = %d", got, shared, factor, shared/factor)
	}

	for _, step := range []struct {
		target     uint32
		partitions int
	}{
		{251, 3}, // ceil((251 − 50)/100) = ceil(2.01)
		{250, 2}, // exactly 2 partitions' worth above the reserved
		{151, 2},
		{150, 1},
		{51, 1},
		{50, 0}, // within the reserved capacity
		{0, 0},
		{5000, 10}, // more than exists: every partition
	} {
		r.GiveMe(step.target)
		if got := spLastVal(rec, batcher.TargetEvent); got != step.partitions {
			t.Fatalf("GiveMe(%d): last target event %d, want ceil((target − %d)/%d) = %d partitions",
				step.target, got, reserved, factor, step.partitions)
		}
		want := uint32(step.partitions*factor + reserved)
		waitFor(t, "capacity after GiveMe", func() bool { return r.Capacity() == want })
		if held := r.Stats().Held; held != step.partitions {
			t.Fatalf("GiveMe(%d): Capacity() %d with %d partitions held, want %d", step.target, r.Capacity(), held, step.partitions)
		}
	}

	// Back to nothing leased, then a larger reserved capacity at run time.
	r.GiveMe(0)
	waitFor(t, "leases given back", func() bool { return r.Capacity() == reserved })
	rec.Reset()
	r.SetReservedCapacity(300)
	if got := r.MaxCapacity(); got != shared+300 {
		t.Fatalf("after SetReservedCapacity(300): MaxCapacity() = %d, want %d", got, shared+300)
	}
	if got := r.Capacity(); got != 300 {
		t.Fatalf("after SetReservedCapacity(300): Capacity() = %d, want 300 (no partition held)", got)
	}
	if got := spLastVal(rec, batcher.CapacityEvent); got != 300 {
		t.Fatalf("after SetReservedCapacity(300): last capacity event %d, want the new capacity 300", got)
	}
	r.GiveMe(401)
	if got := spLastVal(rec, batcher.TargetEvent); got != 2 {
		t.Fatalf("GiveMe(401) with reserved 300: last target event %d, want ceil(101/100) = 2", got)
	}
	waitFor(t, "capacity 500", func() bool { return r.Capacity() == 500 })

	// A smaller reserved capacity: the same target now needs 5 partitions.
	r.SetReservedCapacity(0)
	if got := r.MaxCapacity(); got != shared {
		t.Fatalf("after SetReservedCapacity(0): MaxCapacity() = %d, want %d", got, shared)
	}
	r.GiveMe(401)
	if got := spLastVal(rec, batcher.TargetEvent); got != 5 {
		t.Fatalf("GiveMe(401) with reserved 0: last target event %d, want ceil(401/100) = 5", got)
	}
	waitFor(t, "capacity 500 from 5 partitions", func() bool { return r.Capacity() == 500 && r.Stats().Held == 5 })
}
