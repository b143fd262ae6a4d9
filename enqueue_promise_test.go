package batcher_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/batchertest"
)

// TestPromiseEnqueueDoesNotAllocate: "Enqueue hands operations over through a
// short mutex-guarded queue and does not allocate", and the Performance
// table's "Enqueue of a pre-built op | ... 0 allocs". Operations are built
// beforehand with NewOperation, as a producer holds them ("operations from
// NewOperation are not wrapped: no allocation"). testing.AllocsPerRun counts
// every allocation of the process, so the states measured are those where
// the loop allocates nothing per operation either: before Start, and
// running with a backlog at capacity 0 (the loop leaves what it does not
// hold in the hand-over).
func TestPromiseEnqueueDoesNotAllocate(t *testing.T) {
	const runs = 2000
	cases := []struct {
		name    string
		start   func(t *testing.T) batcher.IBatcher
		context bool
	}{
		{"not started, Enqueue", notStarted, false},
		{"not started, EnqueueContext", notStarted, true},
		{"running at capacity 0, Enqueue", atCapacityZero, false},
		{"running at capacity 0, EnqueueContext", atCapacityZero, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.start(t)
			w := batcher.NewWatcher(func([]batcher.IOperation) {}).WithMaxBatchSize(100)
			ops := make([]batcher.IOperation, runs+1) // AllocsPerRun makes one warm-up run
			for i := range ops {
				ops[i] = batcher.NewOperation(w, 1, nil, true)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			i := 0
			allocs := testing.AllocsPerRun(runs, func() {
				var err error
				if tc.context {
					err = b.EnqueueContext(ctx, ops[i])
				} else {
					err = b.Enqueue(ops[i])
				}
				if err != nil {
					t.Fatalf("Enqueue %d: %v", i, err)
				}
				i++
			})
			if allocs != 0 {
				t.Fatalf("%v allocations per Enqueue of a pre-built operation, want 0", allocs)
			}
		})
	}
}

func notStarted(t *testing.T) batcher.IBatcher {
	b := batcher.NewBatcherWithBuffer(10000)
	t.Cleanup(b.Stop)
	return b
}

func atCapacityZero(t *testing.T) batcher.IBatcher {
	lim := batchertest.NewLimiter(0)
	lim.SetMaxCapacity(10)
	b, _ := startedOn(t, batchertest.NewFakeClock(time.Time{}), 10000, func(b *batcher.Batcher) { b.WithRateLimiter(lim) })
	return b
}

// TestPromiseEnqueueContextReturnsCtxErrUnchanged: "EnqueueContext returns
// ctx.Err() unchanged when its context ends while it waits for room", and
// "Enqueue ... changes nothing when it refuses". A context cancelled with a
// cause still gives ctx.Err() (context.Canceled), not the cause; a context
// already ended is refused the same way once the buffer is full.
func TestPromiseEnqueueContextReturnsCtxErrUnchanged(t *testing.T) {
	cause := errors.New("the request was abandoned")
	cases := []struct {
		name   string
		ctx    func() (context.Context, func())
		before bool // the context ends before EnqueueContext is called
	}{
		{"cancelled while waiting", func() (context.Context, func()) {
			ctx, cancel := context.WithCancel(context.Background())
			return ctx, cancel
		}, false},
		{"cancelled with a cause while waiting", func() (context.Context, func()) {
			ctx, cancel := context.WithCancelCause(context.Background())
			return ctx, func() { cancel(cause) }
		}, false},
		{"deadline passed before the call", func() (context.Context, func()) {
			ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
			return ctx, cancel
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := batcher.NewBatcher() // the default buffer of 10,000, not started: it stays full
			defer b.Stop()
			w := batcher.NewWatcher(func([]batcher.IOperation) {})
			for i := 0; i < 10000; i++ {
				if err := b.Enqueue(batcher.NewOperation(w, 1, i, true)); err != nil {
					t.Fatal(err)
				}
			}
			ctx, end := tc.ctx()
			defer end()
			if tc.before {
				end()
			}
			done := make(chan error, 1)
			go func() { done <- b.EnqueueContext(ctx, batcher.NewOperation(w, 5, "waiting", true)) }()
			if !tc.before {
				end()
			}
			var err error
			select {
			case err = <-done:
			case <-ctxTimeout(t).Done():
				t.Fatal("EnqueueContext did not return when its context ended")
			}
			if err != ctx.Err() {
				t.Fatalf("EnqueueContext: %v, want ctx.Err() unchanged (%v)", err, ctx.Err())
			}
			if b.OperationsInBuffer() != 10000 || b.NeedsCapacity() != 10000 {
				t.Fatalf("the refused operation changed the buffer (%d) or the target (%d)", b.OperationsInBuffer(), b.NeedsCapacity())
			}
		})
	}
}

// TestPromiseBufferOfSizeZero: "BufferNotAllocated | a buffer of size 0",
// from NewBatcherWithBuffer(0) and New(0), for Enqueue and EnqueueContext,
// with and without WithErrorOnFullBuffer (whose BufferFullError it is not);
// the refused operation changes nothing.
func TestPromiseBufferOfSizeZero(t *testing.T) {
	makers := map[string]func() batcher.IBatcher{
		"NewBatcherWithBuffer(0)": func() batcher.IBatcher { return batcher.NewBatcherWithBuffer(0) },
		"New(0)":                  func() batcher.IBatcher { return batcher.New(0) },
		"NewBatcherWithBuffer(0).WithErrorOnFullBuffer": func() batcher.IBatcher { return batcher.NewBatcherWithBuffer(0).WithErrorOnFullBuffer() },
	}
	w := batcher.NewWatcher(func([]batcher.IOperation) {})
	for name, mk := range makers {
		t.Run(name, func(t *testing.T) {
			b := mk()
			defer b.Stop()
			for _, enqueue := range []func(op batcher.IOperation) error{
				b.Enqueue,
				func(op batcher.IOperation) error { return b.EnqueueContext(context.Background(), op) },
			} {
				err := enqueue(batcher.NewOperation(w, 1, nil, true))
				if !errors.As(err, new(batcher.BufferNotAllocated)) {
					t.Fatalf("Enqueue into a buffer of size 0: %v, want BufferNotAllocated", err)
				}
				if b.OperationsInBuffer() != 0 || b.NeedsCapacity() != 0 {
					t.Fatalf("the refused operation changed the buffer (%d) or the target (%d)", b.OperationsInBuffer(), b.NeedsCapacity())
				}
			}
		})
	}
}
