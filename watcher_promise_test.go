package batcher_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costwise/batcher"
)

// These tests check the Watcher table of docs/batcher.md from the outside:
// the defaults a user gets from NewWatcher, a second setting, and extreme
// values.

// redeliverer is a watcher whose callback enqueues every operation it gets
// again, as a user retrying a failed write does, until an Enqueue is
// refused or it has seen stopAfter deliveries.
type redeliverer struct {
	b         batcher.IBatcher
	stopAfter int
	mu        sync.Mutex
	attempts  []uint32 // Attempt() of each delivery, as the callback saw it
	refused   error
	done      chan struct{}
	once      sync.Once
}

func newRedeliverer(b batcher.IBatcher, stopAfter int) *redeliverer {
	return &redeliverer{b: b, stopAfter: stopAfter, done: make(chan struct{})}
}

func (r *redeliverer) callback(batch []batcher.IOperation) {
	for _, op := range batch {
		r.mu.Lock()
		r.attempts = append(r.attempts, op.Attempt())
		enough := len(r.attempts) >= r.stopAfter
		r.mu.Unlock()
		if enough {
			r.once.Do(func() { close(r.done) })
			return
		}
		if err := r.b.Enqueue(op); err != nil {
			r.mu.Lock()
			r.refused = err
			r.mu.Unlock()
			r.once.Do(func() { close(r.done) })
			return
		}
	}
}

// TestPromiseMaxAttempts: "WithMaxAttempts(n) | 0 (no limit) | Enqueue
// refuses an operation whose Attempt() reached n", and TooManyAttemptsError
// "Attempt() reached the watcher's MaxAttempts"; a refused operation changes
// nothing.
func TestPromiseMaxAttempts(t *testing.T) {
	cases := []struct {
		name       string
		max        uint32 // 0: WithMaxAttempts not called
		deliveries int    // what the redelivering callback sees
		refused    bool   // whether its last Enqueue is refused
	}{
		{"default: no limit", 0, 50, false},
		{"max 3", 3, 3, true},
		{"max 1", 1, 1, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, _, _ := started(t, nil)
			r := newRedeliverer(b, 50)
			w := batcher.NewWatcher(r.callback)
			if tc.max > 0 {
				w = w.WithMaxAttempts(tc.max)
			}
			if err := b.Enqueue(batcher.NewOperation(w, 2, "retried", false)); err != nil {
				t.Fatalf("first Enqueue: %v", err)
			}
			select {
			case <-r.done:
			case <-ctxTimeout(t).Done():
				t.Fatal("the redelivering callback never finished")
			}
			r.mu.Lock()
			attempts, refused := append([]uint32(nil), r.attempts...), r.refused
			r.mu.Unlock()
			if len(attempts) != tc.deliveries {
				t.Fatalf("%d deliveries (attempts %v), want %d", len(attempts), attempts, tc.deliveries)
			}
			for i, a := range attempts {
				if a != uint32(i+1) {
					t.Fatalf("delivery %d saw Attempt() = %d, want %d", i+1, a, i+1)
				}
			}
			if !tc.refused {
				if refused != nil {
					t.Fatalf("Enqueue refused with no limit: %v", refused)
				}
				return
			}
			if !errors.As(refused, new(batcher.TooManyAttemptsError)) {
				t.Fatalf("Enqueue at Attempt() = %d with MaxAttempts %d: %v, want TooManyAttemptsError", len(attempts), tc.max, refused)
			}
			waitFor(t, "the last callback to end", func() bool { return b.Inflight() == 0 })
			if b.OperationsInBuffer() != 0 || b.NeedsCapacity() != 0 {
				t.Fatalf("the refused operation changed the buffer (%d) or the target (%d)", b.OperationsInBuffer(), b.NeedsCapacity())
			}
		})
	}

	// An operation of many attempts, made by hand: accepted with no limit,
	// refused by any limit it has reached.
	op := batcher.NewOperation(batcher.NewWatcher(func([]batcher.IOperation) {}), 1, nil, true)
	for i := 0; i < 1000; i++ {
		op.MakeAttempt()
	}
	free := batcher.NewBatcherWithBuffer(1)
	defer free.Stop()
	if err := free.Enqueue(op); err != nil {
		t.Fatalf("an operation of 1,000 attempts with the default MaxAttempts: %v, want accepted", err)
	}
	for _, max := range []uint32{1, 999, 1000} {
		w := batcher.NewWatcher(func([]batcher.IOperation) {}).WithMaxAttempts(max)
		op := batcher.NewOperation(w, 1, nil, true)
		for i := 0; i < 1000; i++ {
			op.MakeAttempt()
		}
		b := batcher.NewBatcherWithBuffer(1)
		if err := b.Enqueue(op); !errors.As(err, new(batcher.TooManyAttemptsError)) {
			t.Fatalf("Attempt() 1,000 with MaxAttempts %d: %v, want TooManyAttemptsError", max, err)
		}
		b.Stop()
	}
}

// TestPromiseMaxBatchSize: "batchable operations are grouped per watcher, at
// most MaxBatchSize each, in enqueue order"; "WithMaxBatchSize(n) | 0 (no
// limit) | a batch reaching n is released at once"; "a batch that is not full
// waits at most one flush interval". The batch events (WithEmitBatch) give
// the release order. 3,000 operations are more than the loop
// takes in one pass (1,024), so the default's single batch spans passes.
func TestPromiseMaxBatchSize(t *testing.T) {
	const ops = 3000
	cases := []struct {
		name      string
		max       uint32 // 0: WithMaxBatchSize not called
		configure func(b *batcher.Batcher)
	}{
		{"default: no limit", 0, nil},
		{"max 7", 7, nil},
		{"max 1", 1, nil},
		{"max 7, fair release under a limiter", 7, func(b *batcher.Batcher) {
			b.WithRateLimiter(batcher.NewProvisionedResource(1_000_000))
			b.WithFairRelease()
		}},
		{"max above the operations", ops + 1, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := newTrackedClock()
			b, rec := startedOn(t, clk, batcher.DefaultBufferSize, func(b *batcher.Batcher) {
				b.WithEmitBatch() // batch events come in release order
				if tc.configure != nil {
					tc.configure(b)
				}
			})
			br := newBarrier(clk, b)
			c := &collector{}
			w := c.watcher()
			if tc.max > 0 {
				w = w.WithMaxBatchSize(tc.max)
			}
			for i := 0; i < ops; i++ {
				if err := b.Enqueue(batcher.NewOperation(w, 1, i, true)); err != nil {
					t.Fatal(err)
				}
			}
			br.sync(t) // the loop has taken all 3,000; no flush yet
			full := 0
			if tc.max > 0 && tc.max <= ops {
				full = ops / int(tc.max) * int(tc.max)
			}
			waitFor(t, fmt.Sprintf("the %d operations of full batches", full), func() bool { return c.ops.Load() >= int64(full) })
			br.sync(t)
			if n := c.ops.Load(); n != int64(full) {
				t.Fatalf("%d operations released before the flush, want the %d of full batches", n, full)
			}
			clk.Advance(batcher.DefaultFlushInterval)
			waitFor(t, "every operation after the flush", func() bool { return c.ops.Load() == ops })
			// Callbacks run on goroutines of their own, so the order they
			// start in is not the release order; the batch events are.
			var batches [][]batcher.IOperation
			waitFor(t, "the batch events", func() bool {
				batches = batches[:0]
				n := 0
				for _, e := range rec.Named(batcher.BatchEvent) {
					if ops := e.Metadata.([]batcher.IOperation); ops[0].Watcher() == w {
						batches = append(batches, ops)
						n += len(ops)
					}
				}
				return n == ops
			})
			next := 0
			for i, batch := range batches {
				if tc.max > 0 && len(batch) > int(tc.max) {
					t.Fatalf("batch %d has %d operations, above MaxBatchSize %d", i, len(batch), tc.max)
				}
				for _, op := range batch {
					if op.Payload().(int) != next {
						t.Fatalf("batch %d: operation %v where %d was next: enqueue order broken", i, op.Payload(), next)
					}
					next++
				}
			}
			wantBatches := 1
			if tc.max > 0 && tc.max <= ops {
				wantBatches = (ops + int(tc.max) - 1) / int(tc.max)
			}
			if len(batches) != wantBatches {
				t.Fatalf("%d batches, want %d", len(batches), wantBatches)
			}
		})
	}
}

// TestPromiseMaxConcurrentBatches: "WithMaxConcurrentBatches(n) | 0 (no
// limit) | at most n callbacks in flight; Inflight() tells how many are".
// Callbacks block until the test lets them go one at a time; each records
// how many run with it.
func TestPromiseMaxConcurrentBatches(t *testing.T) {
	const batches = 40
	cases := []struct {
		name string
		max  uint32 // 0: WithMaxConcurrentBatches not called
	}{
		{"default: no limit", 0},
		{"max 3", 3},
		{"max 1", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, _, _ := started(t, func(b *batcher.Batcher) {
				if tc.max > 0 {
					b.WithMaxConcurrentBatches(tc.max)
				}
			})
			var running, most, startedN atomic.Int64
			tokens := make(chan struct{})
			t.Cleanup(func() { close(tokens) })
			w := batcher.NewWatcher(func([]batcher.IOperation) {
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				startedN.Add(1)
				<-tokens
				running.Add(-1)
			})
			for i := 0; i < batches; i++ {
				if err := b.Enqueue(batcher.NewOperation(w, 1, i, false)); err != nil {
					t.Fatal(err)
				}
			}
			want := int64(batches)
			if tc.max > 0 {
				want = int64(tc.max)
			}
			waitFor(t, fmt.Sprintf("%d callbacks running", want), func() bool { return startedN.Load() >= want })
			if got := b.Inflight(); got != uint32(want) && tc.max > 0 {
				t.Fatalf("Inflight() = %d with %d callbacks blocked, want %d", got, want, want)
			}
			for i := 0; i < batches; i++ {
				if got := b.Inflight(); tc.max > 0 && got > tc.max {
					t.Fatalf("Inflight() = %d, above the limit %d", got, tc.max)
				}
				tokens <- struct{}{}
			}
			if got := most.Load(); got != want {
				t.Fatalf("at most %d callbacks ran at once, want %d", got, want)
			}
			waitFor(t, "Inflight() back to 0", func() bool { return b.Inflight() == 0 })
		})
	}
}

// WithMaxConcurrentBatches holds for batches of zero cost too: those that
// pass a head waiting for credit are callbacks in flight like any other
// (found by a black-box audit: all six ran at once past a limit of 2).
// Capacity 0 keeps a head of cost 1 waiting; six watchers each have one
// free operation; in order and under fair release.
func TestPromiseMaxConcurrentBatchesWithFreeBatches(t *testing.T) {
	const free, limit = 6, 2
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprintf("fair %v", fair), func(t *testing.T) {
			lim := batcher.NewProvisionedResource(100)
			lim.SetCapacity(0) // MaxCapacity stays 100: the head is accepted and waits
			b, fc, _ := started(t, func(b *batcher.Batcher) {
				b.WithRateLimiter(lim).WithMaxConcurrentBatches(limit)
				if fair {
					b.WithFairRelease()
				}
			})
			var running, most, startedN atomic.Int64
			tokens := make(chan struct{})
			t.Cleanup(func() { close(tokens) })
			cb := func([]batcher.IOperation) {
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				startedN.Add(1)
				<-tokens
				running.Add(-1)
			}
			head := batcher.NewWatcher(func([]batcher.IOperation) { t.Error("the head ran without credit") })
			if err := b.Enqueue(batcher.NewOperation(head, 1, "head", false)); err != nil {
				t.Fatal(err)
			}
			for i := range free {
				if err := b.Enqueue(batcher.NewOperation(batcher.NewWatcher(cb), 0, i, false)); err != nil {
					t.Fatal(err)
				}
			}
			for i := range free - limit + 1 {
				want := int64(min(limit+i, free))
				waitFor(t, fmt.Sprintf("%d free callbacks started", want), func() bool {
					fc.Advance(100 * time.Millisecond) // flushes: each release looks again
					return startedN.Load() >= want
				})
				if got := b.Inflight(); got > limit {
					t.Fatalf("Inflight() = %d, above the limit %d", got, limit)
				}
				if i < free-limit {
					tokens <- struct{}{}
				}
			}
			for range limit {
				tokens <- struct{}{}
			}
			if got := most.Load(); got != limit {
				t.Fatalf("at most %d callbacks ran at once, want %d", got, limit)
			}
			waitFor(t, "Inflight() back to 0", func() bool { return b.Inflight() == 0 })
		})
	}
}
