package batcher_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/batchertest"
)

// waitFor polls cond for what happens on the batcher's own goroutines; it
// fails after a generous deadline instead of sleeping for a guessed time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func ctxTimeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// started returns a running batcher on a fake clock with a recorder attached.
func started(t *testing.T, configure func(b *batcher.Batcher)) (*batcher.Batcher, *batchertest.FakeClock, *batchertest.Recorder) {
	t.Helper()
	fc := batchertest.NewFakeClock(time.Time{})
	b, rec := startedOn(t, fc, batcher.DefaultBufferSize, configure)
	return b, fc, rec
}

// startedOn starts a *Batcher on clk with a recorder; configure runs before
// Start.
func startedOn(t *testing.T, clk batcher.Clock, size uint32, configure func(b *batcher.Batcher)) (*batcher.Batcher, *batchertest.Recorder) {
	t.Helper()
	b := batcher.New(size).WithClock(clk)
	if configure != nil {
		configure(b)
	}
	rec := batchertest.NewRecorder()
	b.AddListener(rec.Listener())
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	return b, rec
}

type collector struct {
	mu      sync.Mutex
	batches [][]batcher.IOperation
	ops     atomic.Int64
}

func (c *collector) watcher() batcher.IWatcher {
	return batcher.NewWatcher(func(batch []batcher.IOperation) {
		c.mu.Lock()
		c.batches = append(c.batches, batch)
		c.mu.Unlock()
		c.ops.Add(int64(len(batch)))
	})
}

func (c *collector) snapshot() [][]batcher.IOperation {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]batcher.IOperation(nil), c.batches...)
}

type nilCostOp struct{ batcher.IOperation }

func TestEnqueueChecksInOrderAndChangesNothing(t *testing.T) {
	w := batcher.NewWatcher(func([]batcher.IOperation) {}).WithMaxAttempts(1)
	tried := batcher.NewOperation(w, 1, nil, false)
	tried.MakeAttempt()
	lim := batchertest.NewLimiter(100)
	cases := []struct {
		name string
		op   batcher.IOperation
		want error
	}{
		{"nil operation", nil, batcher.NoOperationError{}},
		{"typed nil operation", (*batcher.Operation)(nil), batcher.NoOperationError{}},
		{"no watcher", batcher.NewOperation(nil, 1, nil, false), batcher.NoWatcherError{}},
		{"no watcher beats too expensive", batcher.NewOperation(nil, 1000, nil, false), batcher.NoWatcherError{}},
		{"too expensive", batcher.NewOperation(w, 101, nil, false), batcher.TooExpensiveError{}},
		{"too expensive beats too many attempts", nilCostOp{tooExpensiveTried(w)}, batcher.TooExpensiveError{}},
		{"too many attempts", tried, batcher.TooManyAttemptsError{}},
		{"too many attempts, an operation type of one's own", nilCostOp{tried}, batcher.TooManyAttemptsError{}},
	}
	b := batcher.NewBatcherWithBuffer(10).WithRateLimiter(lim)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := b.Enqueue(tc.op)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Enqueue: %v, want %T", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "batcher: ") {
				t.Fatalf("message %q does not start with the package name", err)
			}
			if b.OperationsInBuffer() != 0 || b.NeedsCapacity() != 0 {
				t.Fatalf("a rejected op changed the buffer (%d) or target (%d)", b.OperationsInBuffer(), b.NeedsCapacity())
			}
		})
	}
}

func tooExpensiveTried(w batcher.IWatcher) batcher.IOperation {
	op := batcher.NewOperation(w, 1000, nil, false)
	op.MakeAttempt()
	return op
}

func TestBufferFull(t *testing.T) {
	w := batcher.NewWatcher(func([]batcher.IOperation) {})
	b := batcher.NewBatcherWithBuffer(2).WithErrorOnFullBuffer()
	for i := 0; i < 2; i++ {
		if err := b.Enqueue(batcher.NewOperation(w, 3, i, true)); err != nil {
			t.Fatal(err)
		}
	}
	err := b.Enqueue(batcher.NewOperation(w, 3, 2, true))
	if !errors.As(err, new(batcher.BufferFullError)) {
		t.Fatalf("third Enqueue: %v, want BufferFullError", err)
	}
	if b.OperationsInBuffer() != 2 || b.NeedsCapacity() != 6 {
		t.Fatalf("buffer %d target %d after a rejected op, want 2 and 6", b.OperationsInBuffer(), b.NeedsCapacity())
	}

	blocking := batcher.NewBatcherWithBuffer(1)
	if err := blocking.Enqueue(batcher.NewOperation(w, 1, 0, true)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := blocking.EnqueueContext(ctx, batcher.NewOperation(w, 1, 1, true)); err != context.DeadlineExceeded {
		t.Fatalf("EnqueueContext on a full buffer: %v, want the context's own error", err)
	}
	if got := blocking.NeedsCapacity(); got != 1 {
		t.Fatalf("target %d after a timed-out enqueue, want 1", got)
	}
}

func TestBlockedEnqueueProceedsWhenRoomFrees(t *testing.T) {
	c := &collector{}
	small := batcher.New(1).WithClock(batchertest.NewFakeClock(time.Time{}))
	w := c.watcher()
	if err := small.Enqueue(batcher.NewOperation(w, 1, 0, false)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- small.Enqueue(batcher.NewOperation(w, 1, 1, false)) }()
	if err := small.Start(); err != nil {
		t.Fatal(err)
	}
	defer small.Stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("blocked Enqueue never proceeded")
	}
	waitFor(t, "both ops delivered", func() bool { return c.ops.Load() == 2 })
}

func TestEnqueueAfterStopIsRefused(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	b := batcher.NewBatcher()
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	b.Stop()
	w := batcher.NewWatcher(func([]batcher.IOperation) {})
	if err := b.Enqueue(batcher.NewOperation(w, 1, nil, false)); !errors.As(err, new(batcher.BatcherStoppedError)) {
		t.Fatalf("Enqueue after Stop: %v, want BatcherStoppedError", err)
	}
	if b.NeedsCapacity() != 0 || b.OperationsInBuffer() != 0 {
		t.Fatal("a refused op changed the counters")
	}
	if err := b.Start(); !errors.As(err, new(batcher.BatcherImproperOrderError)) {
		t.Fatalf("Start after Stop: %v", err)
	}
}

func TestStartTwice(t *testing.T) {
	b := batcher.NewBatcher()
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	if err := b.Start(); !errors.As(err, new(batcher.BatcherImproperOrderError)) {
		t.Fatalf("second Start: %v, want BatcherImproperOrderError", err)
	}
}

func TestInvalidSettingIsReportedByStart(t *testing.T) {
	b := batcher.NewBatcher().WithFlushInterval(0)
	var ise batcher.InvalidSettingError
	if err := b.Start(); !errors.As(err, &ise) || ise.Setting != "FlushInterval" {
		t.Fatalf("Start with a zero flush interval: %v", err)
	}
}

func TestBatchesGoToTheirWatcherInOrder(t *testing.T) {
	b, fc, _ := started(t, nil)
	a, z := &collector{}, &collector{}
	wa, wz := a.watcher().WithMaxBatchSize(2), z.watcher()
	for i := 0; i < 5; i++ {
		for _, w := range []batcher.IWatcher{wa, wz} {
			if err := b.Enqueue(batcher.NewOperation(w, 1, i, true)); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, "two full batches", func() bool { return a.ops.Load() == 4 })
	fc.Advance(batcher.DefaultFlushInterval)
	waitFor(t, "partial batches", func() bool { return a.ops.Load() == 5 && z.ops.Load() == 5 })
	var sizes []int
	for _, batch := range a.snapshot() {
		sizes = append(sizes, len(batch))
		for _, op := range batch {
			if op.Watcher() != wa || op.Attempt() != 1 {
				t.Fatalf("op %v: watcher mismatch or attempt %d", op.Payload(), op.Attempt())
			}
		}
	}
	if len(sizes) != 3 || sizes[0] != 2 || sizes[1] != 2 || sizes[2] != 1 {
		t.Fatalf("batch sizes %v, want [2 2 1]", sizes)
	}
	zb := z.snapshot()
	if len(zb) != 1 || len(zb[0]) != 5 {
		t.Fatalf("unbounded watcher got %d batches", len(zb))
	}
	for i, op := range zb[0] {
		if op.Payload().(int) != i {
			t.Fatalf("order broken at %d: %v", i, op.Payload())
		}
	}
}

func TestAttemptIsCountedBeforeTheCallback(t *testing.T) {
	b, _, _ := started(t, nil)
	seen := make(chan uint32, 1)
	w := batcher.NewWatcher(func(batch []batcher.IOperation) { seen <- batch[0].Attempt() })
	if err := b.Enqueue(batcher.NewOperation(w, 1, nil, false)); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-seen:
		if got != 1 {
			t.Fatalf("Attempt() in the callback = %d, want 1", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a lone non-batchable op was not released without a flush tick")
	}
}

func TestFirstOpGoesAtOnceUnderALimiter(t *testing.T) {
	c := &collector{}
	b, _, _ := started(t, func(b *batcher.Batcher) { b.WithRateLimiter(batcher.NewProvisionedResource(100)) })
	// The fake clock never moves: the credit a new batcher starts with (one
	// flush interval's worth, 10) pays for the first op and no more.
	for i := 0; i < 3; i++ {
		if err := b.Enqueue(batcher.NewOperation(c.watcher(), 6, i, false)); err != nil {
			t.Fatal(err)
		}
	}
	// The watcher's callbacks run after the ops leave the buffer, so wait
	// for both: two delivered, one still buffered. A third released would
	// empty the buffer.
	waitFor(t, "two ops delivered", func() bool { return c.ops.Load() >= 2 })
	waitFor(t, "loop idle", func() bool { return b.OperationsInBuffer() == 1 })
	if n := c.ops.Load(); n != 2 {
		t.Fatalf("%d ops released from a starting credit of 10 at cost 6, want 2", n)
	}
}

func TestTargetAndCapacityRequests(t *testing.T) {
	lim := batchertest.NewLimiter(0)
	lim.SetMaxCapacity(1000)
	b, fc, rec := started(t, func(b *batcher.Batcher) { b.WithRateLimiter(lim) })
	w := batcher.NewWatcher(func([]batcher.IOperation) {})
	for i := 0; i < 3; i++ {
		if err := b.Enqueue(batcher.NewOperation(w, 7, i, false)); err != nil {
			t.Fatal(err)
		}
	}
	if b.NeedsCapacity() != 21 || b.OperationsInBuffer() != 3 {
		t.Fatalf("target %d buffer %d, want 21 and 3", b.NeedsCapacity(), b.OperationsInBuffer())
	}
	fc.Advance(batcher.DefaultCapacityInterval)
	evs, ok := rec.WaitFor(ctxTimeout(t), batcher.RequestEvent, 1)
	if !ok || evs[0].Val != 21 {
		t.Fatalf("request events %v", evs)
	}
	if got := lim.Targets(); len(got) == 0 || got[0] != 21 {
		t.Fatalf("GiveMe targets %v, want [21]", got)
	}
	lim.SetCapacity(1000)
	fc.Advance(batcher.DefaultFlushInterval)
	waitFor(t, "target back to zero", func() bool { return b.NeedsCapacity() == 0 })
}

func TestPauseBacksOffAndStopDuringPauseReturns(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	fc := batchertest.NewFakeClock(time.Time{})
	b := batcher.New(100).WithClock(fc)
	rec := batchertest.NewRecorder()
	b.AddListener(rec.Listener())
	b.Pause() // not running: ignored
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t)
	b.Pause()
	if evs, ok := rec.WaitFor(ctx, batcher.PauseEvent, 1); !ok || evs[0].Val != 500 {
		t.Fatalf("pause events %v", evs)
	}
	b.Pause()
	if evs, ok := rec.WaitFor(ctx, batcher.PauseEvent, 2); !ok || evs[1].Val != 1000 {
		t.Fatalf("a pause while paused: %v, want 1000 ms", evs)
	}
	fc.Advance(time.Second)
	if evs, ok := rec.WaitFor(ctx, batcher.ResumeEvent, 1); !ok || evs[0].Val != 1000 {
		t.Fatalf("resume events %v", evs)
	}
	b.Pause()
	if evs, ok := rec.WaitFor(ctx, batcher.PauseEvent, 3); !ok || evs[2].Val != 2000 {
		t.Fatalf("a pause right after resume: %v, want 2000 ms", evs)
	}
	stopped := make(chan struct{})
	go func() { b.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop during a pause did not return")
	}
	if rec.Count(batcher.ShutdownEvent) != 1 {
		t.Fatal("no shutdown event")
	}
}

func TestPausedBatcherReleasesNothing(t *testing.T) {
	c := &collector{}
	b, fc, rec := started(t, nil)
	b.Pause()
	rec.WaitFor(ctxTimeout(t), batcher.PauseEvent, 1)
	if err := b.Enqueue(batcher.NewOperation(c.watcher(), 1, nil, false)); err != nil {
		t.Fatal(err)
	}
	fc.Advance(400 * time.Millisecond)
	b.Flush()
	fc.Advance(50 * time.Millisecond)
	if n := c.ops.Load(); n != 0 {
		t.Fatalf("%d ops released during a pause", n)
	}
	fc.Advance(100 * time.Millisecond)
	waitFor(t, "release after resume", func() bool { return c.ops.Load() == 1 })
}

func TestStopKeepsUnreleasedOpsCounted(t *testing.T) {
	before := goleak.IgnoreCurrent()
	lim := batchertest.NewLimiter(0)
	lim.SetMaxCapacity(10)
	b, _, rec := started(t, func(b *batcher.Batcher) { b.WithRateLimiter(lim) })
	w := batcher.NewWatcher(func([]batcher.IOperation) {})
	for i := 0; i < 4; i++ {
		if err := b.Enqueue(batcher.NewOperation(w, 1, i, true)); err != nil {
			t.Fatal(err)
		}
	}
	b.Stop()
	b.Stop()
	// Stop may return before the delivery while a listener runs (see
	// Stop); once the notifier has ended, every event has been delivered.
	if _, ok := rec.WaitFor(ctxTimeout(t), batcher.ShutdownEvent, 1); !ok {
		t.Fatal("no shutdown event")
	}
	goleak.VerifyNone(t, before)
	evs := rec.Named(batcher.ShutdownEvent)
	if len(evs) != 1 || evs[0].Val != 4 {
		t.Fatalf("shutdown events %+v, want one with val 4", evs)
	}
	if b.OperationsInBuffer() != 4 {
		t.Fatalf("OperationsInBuffer after Stop = %d, want 4", b.OperationsInBuffer())
	}
}

func TestShutdownDeliversEverything(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := &collector{}
	b := batcher.NewBatcher().WithRateLimiter(batcher.NewProvisionedResource(100000)).WithFlushInterval(time.Hour)
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	w := c.watcher().WithMaxBatchSize(1000)
	for i := 0; i < 250; i++ {
		if err := b.Enqueue(batcher.NewOperation(w, 1, i, true)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Shutdown(ctxTimeout(t)); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if n := c.ops.Load(); n != 250 {
		t.Fatalf("delivered %d of 250", n)
	}
	if err := b.Enqueue(batcher.NewOperation(w, 1, 0, true)); !errors.As(err, new(batcher.BatcherStoppedError)) {
		t.Fatalf("Enqueue after Shutdown: %v", err)
	}
}

func TestShutdownReportsWhatWasLeft(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	lim := batchertest.NewLimiter(0)
	lim.SetMaxCapacity(10)
	b := batcher.NewBatcher().WithRateLimiter(lim)
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	w := batcher.NewWatcher(func([]batcher.IOperation) {})
	for i := 0; i < 3; i++ {
		if err := b.Enqueue(batcher.NewOperation(w, 1, i, false)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	err := b.Shutdown(ctx)
	var sie batcher.ShutdownIncompleteError
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &sie) || sie.Unreleased != 3 {
		t.Fatalf("Shutdown: %v", err)
	}
	if !strings.Contains(err.Error(), "3 operations") {
		t.Fatalf("message %q does not give the count", err)
	}
}

func TestPanickingCallbackIsRecovered(t *testing.T) {
	b, _, rec := started(t, nil)
	w := batcher.NewWatcher(func([]batcher.IOperation) { panic("boom") })
	if err := b.Enqueue(batcher.NewOperation(w, 5, nil, false)); err != nil {
		t.Fatal(err)
	}
	evs, ok := rec.WaitFor(ctxTimeout(t), batcher.ErrorEvent, 1)
	if !ok || !strings.Contains(evs[0].Msg, "boom") {
		t.Fatalf("error events %v", evs)
	}
	waitFor(t, "target released", func() bool { return b.NeedsCapacity() == 0 && b.Inflight() == 0 })
	c := &collector{}
	if err := b.Enqueue(batcher.NewOperation(c.watcher(), 1, nil, false)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "batcher still running", func() bool { return c.ops.Load() == 1 })
}

func TestListenersMayCallTheBatcher(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	b := batcher.New(10).WithEmitBatch()
	var self atomic.Value
	calls := make(chan string, 10)
	id := b.AddListener(func(event string, val int, msg string, md interface{}) {
		if event != batcher.BatchEvent {
			return
		}
		b.RemoveListener(self.Load().(uuid.UUID))
		_ = b.OperationsInBuffer() + b.NeedsCapacity() + b.Inflight()
		b.Flush()
		b.Pause()
		calls <- event
		b.Stop() // from the loop goroutine: must not deadlock
	})
	self.Store(uuid.UUID(id))
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	w := batcher.NewWatcher(func([]batcher.IOperation) {})
	for i := 0; i < 2; i++ {
		_ = b.Enqueue(batcher.NewOperation(w, 1, i, false))
	}
	select {
	case <-calls:
	case <-time.After(10 * time.Second):
		t.Fatal("listener never ran")
	}
	b.Stop()
	if len(calls) != 0 {
		t.Fatal("a listener that removed itself was called again")
	}
}

func TestConfigurationAfterStartIsIgnored(t *testing.T) {
	c := &collector{}
	b, fc, _ := started(t, nil)
	b.WithRateLimiter(batcher.NewProvisionedResource(0)).WithErrorOnFullBuffer()
	if err := b.Enqueue(batcher.NewOperation(c.watcher(), 5, nil, true)); err != nil {
		t.Fatalf("a limiter set after Start was applied: %v", err)
	}
	fc.Advance(batcher.DefaultFlushInterval)
	waitFor(t, "release without the late limiter", func() bool { return c.ops.Load() == 1 })
}
