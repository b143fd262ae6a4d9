package batcher_test

import (
	"context"
	"testing"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/batchertest"
)

func TestProvisionedResource(t *testing.T) {
	r := batcher.NewProvisionedResource(1000)
	rec := batchertest.NewRecorder()
	r.AddListener(rec.Listener())
	ctx := context.Background()
	if err := r.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	r.GiveMe(5000)
	if r.Capacity() != 1000 || r.MaxCapacity() != 1000 {
		t.Fatalf("capacity %d max %d, want 1000", r.Capacity(), r.MaxCapacity())
	}
	r.SetCapacity(250)
	if r.Capacity() != 250 || r.MaxCapacity() != 1000 {
		t.Fatalf("after SetCapacity(250): capacity %d max %d, want 250 and 1000", r.Capacity(), r.MaxCapacity())
	}
	r.SetCapacity(250) // unchanged: no event
	r.Stop()
	r.Stop()
	caps := rec.Named(batcher.CapacityEvent)
	if len(caps) != 2 || caps[0].Val != 1000 || caps[1].Val != 250 {
		t.Fatalf("capacity events %+v, want 1000 then 250", caps)
	}
	if rec.Count(batcher.ShutdownEvent) != 1 {
		t.Fatalf("shutdown events: %d, want 1", rec.Count(batcher.ShutdownEvent))
	}
}

// TestSetCapacityChangesTheRate runs a batcher against a provisioned resource
// whose capacity is lowered to zero: operations that fit the capacity it was
// created with are still accepted, nothing of positive cost goes while it is
// zero, and everything goes once capacity returns.
func TestSetCapacityChangesTheRate(t *testing.T) {
	r := batcher.NewProvisionedResource(1000)
	c := &collector{}
	b, fc, _ := started(t, func(b *batcher.Batcher) { b.WithRateLimiter(r) })
	w := c.watcher()
	fc.Advance(batcher.DefaultFlushInterval)
	if err := b.Enqueue(batcher.NewOperation(w, 10, 0, false)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "first op", func() bool { return c.ops.Load() == 1 })
	r.SetCapacity(0)
	if r.MaxCapacity() != 1000 {
		t.Fatalf("MaxCapacity after SetCapacity(0): %d, want 1000", r.MaxCapacity())
	}
	for i := 1; i <= 3; i++ {
		if err := b.Enqueue(batcher.NewOperation(w, 10, i, false)); err != nil {
			t.Fatalf("enqueue at zero capacity: %v", err)
		}
	}
	if err := b.Enqueue(batcher.NewOperation(w, 1001, 4, false)); err == nil {
		t.Fatal("an op costlier than MaxCapacity was accepted")
	}
	for i := 0; i < 20; i++ {
		fc.Advance(batcher.DefaultFlushInterval)
	}
	b.Flush()
	waitFor(t, "buffered ops counted", func() bool { return b.OperationsInBuffer() == 3 })
	if n := c.ops.Load(); n != 1 {
		t.Fatalf("%d ops released at zero capacity, want only the first", n)
	}
	r.SetCapacity(1000)
	for i := 0; i < 5 && c.ops.Load() < 4; i++ {
		fc.Advance(batcher.DefaultFlushInterval)
		b.Flush()
	}
	waitFor(t, "ops released after capacity returned", func() bool { return c.ops.Load() == 4 })
}

// TestProvisionedStopFromItsShutdownListener checks that a shutdown listener
// may call Stop again without deadlocking, before and after Start.
func TestProvisionedStopFromItsShutdownListener(t *testing.T) {
	r := batcher.NewProvisionedResource(10)
	calls := 0
	r.AddListener(func(event string, val int, msg string, md interface{}) {
		if event == batcher.ShutdownEvent {
			calls++
			r.Stop()
		}
	})
	r.Stop()
	r.Stop()
	if calls != 1 {
		t.Fatalf("shutdown listener called %d times, want 1", calls)
	}
}
