package batcher_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/costwise/batcher"
)

// within fails the test unless fn returns within d.
func within(t *testing.T, d time.Duration, what string, fn func()) time.Duration {
	t.Helper()
	start := time.Now()
	done := make(chan struct{})
	go func() { fn(); close(done) }()
	select {
	case <-done:
		return time.Since(start)
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
		return 0
	}
}

// TestShutdownFromErrorListenerAfterPanic calls Shutdown from the listener
// of the error event a panicking callback raises: the batch that panicked
// no longer counts as in flight then, so Shutdown completes.
func TestShutdownFromErrorListenerAfterPanic(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	b := batcher.New(10)
	w := batcher.NewWatcher(func([]batcher.IOperation) { panic("callback bug") })
	result := make(chan error, 1)
	b.AddListener(func(event string, _ int, _ string, _ interface{}) {
		if event == batcher.ErrorEvent {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			result <- b.Shutdown(ctx)
		}
	})
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	if err := b.Enqueue(batcher.NewOperation(w, 1, nil, false)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-result:
		if err != nil {
			t.Fatalf("Shutdown from the error listener: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown from the error listener did not return")
	}
	b.Stop()
}

// TestStopBeforeStartFromShutdownListener stops a batcher that never
// started, with a shutdown listener that calls Stop again.
func TestStopBeforeStartFromShutdownListener(t *testing.T) {
	b := batcher.New(10)
	shutdowns := 0
	b.AddListener(func(event string, _ int, _ string, _ interface{}) {
		if event == batcher.ShutdownEvent {
			shutdowns++
			b.Stop()
		}
	})
	within(t, 5*time.Second, "Stop before Start", func() { b.Stop(); b.Stop() })
	if shutdowns != 1 {
		t.Fatalf("%d shutdown events, want 1", shutdowns)
	}
	if err := b.Start(); !errors.As(err, new(batcher.BatcherImproperOrderError)) {
		t.Fatalf("Start after Stop: %v, want BatcherImproperOrderError", err)
	}
}

// TestShutdownFromCallbackEndsAtDeadline calls Shutdown from a watcher
// callback: it waits for callbacks, its own included, so it can only end at
// its context's deadline, and it does end then, reporting the context error.
func TestShutdownFromCallbackEndsAtDeadline(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	b := batcher.New(10)
	result := make(chan error, 1)
	w := batcher.NewWatcher(func([]batcher.IOperation) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		result <- b.Shutdown(ctx)
	})
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	if err := b.Enqueue(batcher.NewOperation(w, 1, nil, false)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-result:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown from a callback: %v, want the context's deadline error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown from a callback did not end at its deadline")
	}
	b.Stop()
}

// TestPanickingListenerReported registers a listener that panics: the
// process survives, the other listeners get an error event carrying a
// ListenerPanicError, and the panicking listener keeps being called.
func TestPanickingListenerReported(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	b := batcher.New(10).WithEmitBatch()
	calls := 0 // the notifier's only, read after Stop
	b.AddListener(func(event string, _ int, _ string, _ interface{}) {
		if event == batcher.BatchEvent {
			calls++
			panic("listener bug")
		}
	})
	reports := make(chan error, 10)
	b.AddListener(func(event string, _ int, _ string, md interface{}) {
		var pe batcher.ListenerPanicError
		if err, ok := md.(error); ok && event == batcher.ErrorEvent && errors.As(err, &pe) {
			reports <- err
		}
	})
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	w := batcher.NewWatcher(func([]batcher.IOperation) {})
	for i := 0; i < 2; i++ {
		if err := b.Enqueue(batcher.NewOperation(w, 1, nil, false)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-reports:
		case <-time.After(10 * time.Second):
			t.Fatalf("no error event for the listener's panic %d", i+1)
		}
	}
	b.Stop()
	if calls != 2 {
		t.Fatalf("the panicking listener was called %d times, want 2: it stays registered", calls)
	}
}
