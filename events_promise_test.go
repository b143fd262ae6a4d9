package batcher_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/batchertest"
)

// These tests check rows of the Events table of docs/batcher.md, the
// configuration table's WithEmitBatch, the pause back-off of the model and
// the ProvisionedResource section, from the outside.

// stoppedEvents stops b and returns what its listeners got: the shutdown
// event comes last, so once it is recorded every earlier event is.
func stoppedEvents(t *testing.T, b batcher.IBatcher, rec *batchertest.Recorder) []batchertest.Event {
	t.Helper()
	b.Stop()
	if _, ok := rec.WaitFor(ctxTimeout(t), batcher.ShutdownEvent, 1); !ok {
		t.Fatal("no shutdown event")
	}
	return rec.Events()
}

// TestPromiseBatchEvents: "WithEmitBatch() | off | a batch event per batch
// with the operations as metadata", and the event's val, "operations in the
// batch". Batches of 1, 4 and 5 operations (MaxBatchSize 4: 9 operations
// make a full batch of 4, then one closed by a non-batchable operation).
func TestPromiseBatchEvents(t *testing.T) {
	for _, emit := range []bool{false, true} {
		t.Run(fmt.Sprintf("WithEmitBatch %v", emit), func(t *testing.T) {
			b, fc, rec := started(t, func(b *batcher.Batcher) {
				if emit {
					b.WithEmitBatch()
				}
			})
			c := &collector{}
			w := c.watcher().WithMaxBatchSize(4)
			for i := 0; i < 6; i++ {
				if err := b.Enqueue(batcher.NewOperation(w, 1, i, true)); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Enqueue(batcher.NewOperation(w, 1, 6, false)); err != nil {
				t.Fatal(err)
			}
			for i := 7; i < 9; i++ {
				if err := b.Enqueue(batcher.NewOperation(w, 1, i, true)); err != nil {
					t.Fatal(err)
				}
			}
			fc.Advance(batcher.DefaultFlushInterval)
			waitFor(t, "every operation", func() bool { return c.ops.Load() == 9 })
			var got [][]batcher.IOperation
			for _, e := range stoppedEvents(t, b, rec) {
				if e.Name != batcher.BatchEvent {
					continue
				}
				ops, ok := e.Metadata.([]batcher.IOperation)
				if !ok || len(ops) != e.Val {
					t.Fatalf("batch event val %d with metadata %#v, want the []IOperation of val operations", e.Val, e.Metadata)
				}
				got = append(got, ops)
			}
			if !emit {
				if len(got) != 0 {
					t.Fatalf("%d batch events without WithEmitBatch, want none (off by default)", len(got))
				}
				return
			}
			// Release order: the full batch of 4, the rest closed by the
			// non-batchable operation, that one alone, the last 2 at the flush.
			want := [][]int{{0, 1, 2, 3}, {4, 5}, {6}, {7, 8}}
			if fmt.Sprint(payloads(got)) != fmt.Sprint(want) {
				t.Fatalf("batch events carry %v, want %v", payloads(got), want)
			}
			delivered := map[batcher.IOperation]bool{}
			for _, batch := range c.snapshot() {
				for _, op := range batch {
					delivered[op] = true
				}
			}
			for _, batch := range got {
				for _, op := range batch {
					if !delivered[op] {
						t.Fatalf("a batch event carries operation %v that no callback got", op.Payload())
					}
				}
			}
		})
	}
}

func payloads(batches [][]batcher.IOperation) [][]int {
	var out [][]int
	for _, batch := range batches {
		var p []int
		for _, op := range batch {
			p = append(p, op.Payload().(int))
		}
		out = append(out, p)
	}
	return out
}

// TestPromiseErrorEventOfAPanickingCallback: "error | Batcher (a callback
// panicked) | Batcher: batch size | the panic value | Batcher: the batch",
// for batches of 1 and 3 and a panic with an error value, and "A panicking
// callback is recovered": the batch's cost leaves the target.
func TestPromiseErrorEventOfAPanickingCallback(t *testing.T) {
	for _, size := range []int{1, 3} {
		t.Run(fmt.Sprintf("batch of %d", size), func(t *testing.T) {
			b, fc, rec := started(t, nil)
			value := errors.New("datastore said no")
			w := batcher.NewWatcher(func([]batcher.IOperation) { panic(value) }).WithMaxBatchSize(uint32(size))
			for i := 0; i < size; i++ {
				if err := b.Enqueue(batcher.NewOperation(w, 5, i, true)); err != nil {
					t.Fatal(err)
				}
			}
			fc.Advance(batcher.DefaultFlushInterval) // not needed for a full batch; harmless
			evs, ok := rec.WaitFor(ctxTimeout(t), batcher.ErrorEvent, 1)
			if !ok {
				t.Fatal("no error event for a panicking callback")
			}
			e := evs[0]
			if e.Val != size {
				t.Fatalf("error event val %d, want the batch size %d", e.Val, size)
			}
			if !strings.Contains(e.Msg, value.Error()) {
				t.Fatalf("error event msg %q does not give the panic value %q", e.Msg, value)
			}
			ops, ok := e.Metadata.([]batcher.IOperation)
			if !ok || len(ops) != size {
				t.Fatalf("error event metadata %#v, want the batch of %d", e.Metadata, size)
			}
			for i, op := range ops {
				if op.Payload().(int) != i || op.Watcher() != w {
					t.Fatalf("error event metadata[%d] is %v of another watcher or out of order", i, op.Payload())
				}
			}
			waitFor(t, "the target to drop", func() bool { return b.NeedsCapacity() == 0 && b.Inflight() == 0 })
		})
	}
}

// TestPromisePauseBackOffAfterResume: "A Pause while paused, or within one
// pause time of the last resume, doubles the length ...; ten pause times
// without a Pause reset it", and the resume event's val, "length of the
// pause that ended, ms". The existing test (TestPromiseDefaultMaxPauseTime)
// covers Pause while paused only.
func TestPromisePauseBackOffAfterResume(t *testing.T) {
	for _, base := range []time.Duration{500 * time.Millisecond, 200 * time.Millisecond} {
		t.Run("pause time "+base.String(), func(t *testing.T) {
			clk := newTrackedClock()
			b, rec := startedOn(t, clk, 100, func(b *batcher.Batcher) {
				if base != 500*time.Millisecond {
					b.WithPauseTime(base)
				}
			})
			ctx := ctxTimeout(t)
			origin := clk.Now()
			ms := func(d time.Duration) int { return int(d.Milliseconds()) }
			pauses, resumes := 0, 0
			pause := func(want time.Duration) {
				t.Helper()
				b.Pause()
				pauses++
				evs, ok := rec.WaitFor(ctx, batcher.PauseEvent, pauses)
				if !ok {
					t.Fatalf("no pause event for Pause %d", pauses)
				}
				if got := evs[pauses-1].Val; got != ms(want) {
					t.Fatalf("Pause %d at %v: length %d ms, want %d ms", pauses, clk.Now().Sub(origin), got, ms(want))
				}
			}
			resume := func(after time.Duration) {
				t.Helper()
				clk.Advance(after - time.Millisecond)
				clk.drained(t)
				if n := rec.Count(batcher.ResumeEvent); n != resumes {
					t.Fatalf("resumed 1 ms before the pause of %v ended", after)
				}
				clk.Advance(time.Millisecond)
				resumes++
				evs, ok := rec.WaitFor(ctx, batcher.ResumeEvent, resumes)
				if !ok || evs[resumes-1].Val != ms(after) {
					t.Fatalf("resume events %+v, want number %d with val %d", evs, resumes, ms(after))
				}
			}
			pause(base)
			resume(base)
			clk.Advance(base) // exactly one pause time after the resume: doubles
			pause(2 * base)
			resume(2 * base)
			clk.Advance(base / 2)
			pause(4 * base)
			resume(4 * base)
			// Ten pause times after the last Pause, counted from it: the
			// length is back to the pause time.
			clk.Advance(10*base - 4*base)
			pause(base)
			resume(base)
		})
	}
}

// TestPromiseProvisionedMaxCapacityIsTheLargest: "MaxCapacity() is the
// largest capacity the resource has had (the one it was created with, or a
// larger one set since), so SetCapacity(0) pauses releases without making
// Enqueue refuse operations that fitted before", with TooExpensiveError
// ("cost above the rate limiter's MaxCapacity") at the boundary.
func TestPromiseProvisionedMaxCapacityIsTheLargest(t *testing.T) {
	r := batcher.NewProvisionedResource(1000)
	b := batcher.NewBatcherWithBuffer(100).WithRateLimiter(r)
	defer b.Stop()
	w := batcher.NewWatcher(func([]batcher.IOperation) {})
	fits := func(cost uint32, want bool) {
		t.Helper()
		err := b.Enqueue(batcher.NewOperation(w, cost, nil, false))
		if want && err != nil {
			t.Fatalf("cost %d with MaxCapacity %d: %v, want accepted", cost, r.MaxCapacity(), err)
		}
		if !want && !errors.As(err, new(batcher.TooExpensiveError)) {
			t.Fatalf("cost %d with MaxCapacity %d: %v, want TooExpensiveError", cost, r.MaxCapacity(), err)
		}
	}
	fits(1000, true)
	fits(1001, false)
	for _, step := range []struct{ set, capacity, max uint32 }{
		{2500, 2500, 2500}, // larger: the new largest
		{300, 300, 2500},
		{0, 0, 2500},
		{2000, 2000, 2500},
		{2501, 2501, 2501},
	} {
		r.SetCapacity(step.set)
		if r.Capacity() != step.capacity || r.MaxCapacity() != step.max {
			t.Fatalf("after SetCapacity(%d): Capacity %d, MaxCapacity %d; want %d and %d",
				step.set, r.Capacity(), r.MaxCapacity(), step.capacity, step.max)
		}
		fits(step.max, true)
		fits(step.max+1, false)
	}
}

// A callback still running when Stop returns (Stop does not wait for
// callbacks) that then panics raises its error event after the shutdown
// event, as docs/batcher.md says: the panic is reported, not lost.
func TestPromisePanicAfterStopIsReported(t *testing.T) {
	b, fc, rec := started(t, nil)
	running, release := make(chan struct{}), make(chan struct{})
	w := batcher.NewWatcher(func([]batcher.IOperation) {
		close(running)
		<-release
		panic("late")
	})
	if err := b.Enqueue(batcher.NewOperation(w, 1, "x", false)); err != nil {
		t.Fatal(err)
	}
	fc.Advance(batcher.DefaultFlushInterval)
	<-running
	b.Stop()
	close(release)
	if _, ok := rec.WaitFor(ctxTimeout(t), batcher.ErrorEvent, 1); !ok {
		t.Fatal("no error event for a callback that panicked after Stop")
	}
	var names []string
	for _, e := range rec.Events() {
		if e.Name == batcher.ShutdownEvent || e.Name == batcher.ErrorEvent {
			names = append(names, e.Name)
		}
	}
	if !slices.Equal(names, []string{batcher.ShutdownEvent, batcher.ErrorEvent}) {
		t.Fatalf("events %v, want shutdown then the late panic's error", names)
	}
}
