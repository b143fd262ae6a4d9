package batcher_test

import (
	"sync"
	"testing"
	"time"

	"github.com/costwise/batcher"
)

type batchLog struct {
	mu    sync.Mutex
	sizes []int
	waits []time.Duration
}

func (l *batchLog) ObserveBatch(ops int, cost uint64, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sizes = append(l.sizes, ops)
	l.waits = append(l.waits, wait)
}

func TestStatsAndObserver(t *testing.T) {
	obs := &batchLog{}
	b, fc, rec := started(t, func(b *batcher.Batcher) { b.WithObserver(obs) })
	c := &collector{}
	w := c.watcher().WithMaxBatchSize(3)
	for i := 0; i < 4; i++ {
		if err := b.Enqueue(batcher.NewOperation(w, 2, i, true)); err != nil {
			t.Fatal(err)
		}
	}
	_ = b.Enqueue(nil)
	waitFor(t, "full batch", func() bool { return c.ops.Load() == 3 })
	fc.Advance(100 * time.Millisecond) // the flush tick releases the last op
	waitFor(t, "partial batch", func() bool { return c.ops.Load() == 4 })
	b.Pause()
	rec.WaitFor(ctxTimeout(t), batcher.PauseEvent, 1)

	s := b.Stats()
	if s.Enqueued != 4 || s.Released != 4 || s.CostReleased != 8 || s.Batches != 2 {
		t.Fatalf("stats %+v", s)
	}
	if s.Rejected["no_operation"] != 1 || s.Pauses != 1 || s.PausedSeconds != 0.5 || !s.Running {
		t.Fatalf("stats %+v", s)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.sizes) != 2 || obs.sizes[0] != 3 || obs.sizes[1] != 1 {
		t.Fatalf("observed sizes %v", obs.sizes)
	}
	if obs.waits[0] != 0 || obs.waits[1] != 100*time.Millisecond {
		t.Fatalf("observed waits %v, want 0 and 100ms", obs.waits)
	}
}

// A backlog waits in the hand-over while capacity is 0 (the loop holds only
// part of it in batches); the wait the observer gets must still run from
// Enqueue, however late the loop took an operation in.
func TestObserverWaitCountsBacklog(t *testing.T) {
	obs := &batchLog{}
	rl := batcher.NewProvisionedResource(1000)
	rl.SetCapacity(0)
	b, fc, _ := started(t, func(b *batcher.Batcher) { b.WithObserver(obs).WithRateLimiter(rl) })
	c := &collector{}
	w := c.watcher().WithMaxBatchSize(100)
	const n = 5000 // beyond what a blocked loop takes from the hand-over
	for i := 0; i < n; i++ {
		if err := b.Enqueue(batcher.NewOperation(w, 1, i, true)); err != nil {
			t.Fatal(err)
		}
	}
	fc.Advance(10 * time.Second) // nothing can go: capacity 0
	if got := c.ops.Load(); got != 0 {
		t.Fatalf("%d operations released at capacity 0", got)
	}
	rl.SetCapacity(1_000_000_000)
	for i := 0; c.ops.Load() < n; i++ {
		if i == 1000 {
			t.Fatalf("%d of %d operations released after 100 s", c.ops.Load(), n)
		}
		prev := c.ops.Load()
		fc.Advance(100 * time.Millisecond)
		waitFor(t, "a release", func() bool { got := c.ops.Load(); return got > prev || got == n })
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	for i, wait := range obs.waits {
		if wait < 10*time.Second {
			t.Fatalf("batch %d of %d (%d operations) waited %v, want at least 10s (enqueued before the 10-s stall)",
				i, len(obs.waits), obs.sizes[i], wait)
		}
	}
}
