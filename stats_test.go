package batcher_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costwise/batcher"
)

type batchLog struct {
	mu    sync.Mutex
	sizes []int
	costs []uint64
	waits []time.Duration
}

func (l *batchLog) ObserveBatch(ops int, cost uint64, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sizes = append(l.sizes, ops)
	l.costs = append(l.costs, cost)
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
	for _, fair := range []bool{false, true} {
		name := "in order"
		if fair {
			name = "fair release"
		}
		t.Run(name, func(t *testing.T) { testObserverWaitCountsBacklog(t, fair) })
	}
}

func testObserverWaitCountsBacklog(t *testing.T, fair bool) {
	obs := &batchLog{}
	rl := batcher.NewProvisionedResource(1000)
	rl.SetCapacity(0)
	b, fc, _ := started(t, func(b *batcher.Batcher) {
		b.WithObserver(obs).WithRateLimiter(rl)
		if fair {
			b.WithFairRelease()
		}
	})
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

// Operations pushed while the loop leaves the hand-over's operations there
// (blocked at capacity 0) count their wait from their own Enqueue, not from
// the loop's last take: the first 5,000 are enqueued at 0 and the loop
// holds most of them in the hand-over; the next 5,000, of cost 2, at 1 s;
// all are released once the capacity rises, at R, each alone. Those of the
// first wait R, the others R - 1 s, exactly, where R is 10 s or 10.1 s.
func TestHeldHandoverStampsEachPush(t *testing.T) {
	obs := &batchLog{}
	rl := batcher.NewProvisionedResource(1000)
	rl.SetCapacity(0)
	b, fc, _ := started(t, func(b *batcher.Batcher) { b.WithObserver(obs).WithRateLimiter(rl) })
	var released atomic.Int64
	w := batcher.NewWatcher(func(ops []batcher.IOperation) { released.Add(int64(len(ops))) })
	enqueue := func(cost uint32) {
		for i := 0; i < 5000; i++ {
			if err := b.Enqueue(batcher.NewOperation(w, cost, nil, false)); err != nil {
				t.Fatal(err)
			}
		}
	}
	enqueue(1)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b.HandoverHeld() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the loop never left operations in the hand-over")
		}
		time.Sleep(time.Millisecond)
	}
	fc.Advance(time.Second)
	enqueue(2)
	fc.Advance(9 * time.Second)
	rl.SetCapacity(1_000_000_000)
	start := fc.Now()
	fc.Advance(100 * time.Millisecond)
	for released.Load() < 10_000 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 10000 released", released.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if fc.Now() != start.Add(100*time.Millisecond) {
		t.Fatal("the clock moved")
	}
	// The loop may still be handling the tick of the 9-second advance when
	// the capacity rises, and then releases at start rather than 100 ms
	// later (CI saw it once): either release time is right, but each
	// operation must have waited from its own push, 1 s apart for the two.
	late := 10*time.Second + 100*time.Millisecond
	obs.mu.Lock()
	defer obs.mu.Unlock()
	second := 0
	for i, cost := range obs.costs {
		want := late
		if cost == 2 {
			want = late - time.Second
			second++
		}
		w := obs.waits[i]
		if obs.sizes[i] != 1 || (w != want && w != want-100*time.Millisecond) {
			t.Fatalf("batch %d (%d operations of cost %d) waited %v, want %v or %v", i, obs.sizes[i], cost, w, want-100*time.Millisecond, want)
		}
	}
	if second != 5000 {
		t.Fatalf("%d batches of the second 5,000, want 5000", second)
	}
}
