package batcher_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/costwise/batcher"
)

// fickleOp is a custom IOperation whose answers change once accepted: its
// watcher becomes nil (or a typed nil) and its cost drops to zero.
type fickleOp struct {
	w        batcher.IWatcher
	cost     uint32
	accepted atomic.Bool
	typedNil bool
	attempts atomic.Uint32
}

func (o *fickleOp) Payload() interface{} { return "fickle" }
func (o *fickleOp) Attempt() uint32      { return o.attempts.Load() }
func (o *fickleOp) MakeAttempt()         { o.attempts.Add(1) }
func (o *fickleOp) IsBatchable() bool    { return !o.accepted.Load() }
func (o *fickleOp) Cost() uint32 {
	if o.accepted.Load() {
		return 0
	}
	return o.cost
}
func (o *fickleOp) Watcher() batcher.IWatcher {
	switch {
	case !o.accepted.Load():
		return o.w
	case o.typedNil:
		return (*batcher.Watcher)(nil)
	}
	return nil
}

// nilWatcher is a caller's own IWatcher type, to pass as a typed nil.
type nilWatcher struct{ batcher.IWatcher }

// TestCustomOperationReadOnceAtEnqueue enqueues operations whose watcher
// turns nil and whose cost drops after Enqueue accepted them: the loop uses
// what Enqueue read, so nothing crashes, each is delivered to its watcher
// as the caller's own value, and the target is back to zero once every
// callback has returned.
func TestCustomOperationReadOnceAtEnqueue(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	b := batcher.New(100).WithRateLimiter(batcher.NewProvisionedResource(1000)).WithFlushInterval(10 * time.Millisecond)
	delivered := make(chan batcher.IOperation, 10)
	release := make(chan struct{})
	w := batcher.NewWatcher(func(ops []batcher.IOperation) {
		<-release
		for _, op := range ops {
			delivered <- op
		}
	})
	var ops []*fickleOp
	for i := 0; i < 4; i++ {
		op := &fickleOp{w: w, cost: 50, typedNil: i%2 == 1}
		if err := b.Enqueue(op); err != nil {
			t.Fatal(err)
		}
		op.accepted.Store(true)
		ops = append(ops, op)
	}
	if got := b.NeedsCapacity(); got != 200 {
		t.Fatalf("target %d after four operations of cost 50, want 200", got)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	close(release)
	for i := 0; i < 4; i++ {
		select {
		case op := <-delivered:
			if _, ok := op.(*fickleOp); !ok {
				t.Fatalf("the watcher got a %T, want the caller's *fickleOp", op)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of 4 operations delivered", i)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for b.Inflight() > 0 || b.NeedsCapacity() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("target %d with %d batches in flight after every callback, want 0", b.NeedsCapacity(), b.Inflight())
		}
		time.Sleep(time.Millisecond)
	}
	b.Stop()
	for _, op := range ops {
		if op.Attempt() != 1 {
			t.Fatalf("an operation was attempted %d times, want 1", op.Attempt())
		}
	}
}

// TestTypedNilWatcherRefused checks that a typed nil of the caller's own
// IWatcher type is refused as no watcher.
func TestTypedNilWatcherRefused(t *testing.T) {
	b := batcher.New(10)
	op := &fickleOp{w: (*nilWatcher)(nil), cost: 1}
	if err := b.Enqueue(op); !errors.As(err, new(batcher.NoWatcherError)) {
		t.Fatalf("Enqueue with a typed nil watcher: %v, want NoWatcherError", err)
	}
}
