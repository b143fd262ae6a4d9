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
	if r.Capacity() != 250 || r.MaxCapacity() != 250 {
		t.Fatalf("after SetCapacity: capacity %d max %d, want 250", r.Capacity(), r.MaxCapacity())
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
// whose capacity is lowered to zero: nothing of positive cost goes after it.
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
	if err := b.Enqueue(batcher.NewOperation(w, 10, 1, false)); err == nil {
		t.Fatal("an op costlier than the new max capacity was accepted")
	}
}
