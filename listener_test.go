package batcher_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/costwise/batcher"
)

// TestListenerMayStopShutdownAndEnqueue checks that a listener may call
// Shutdown, Stop and a blocking Enqueue on a full buffer without deadlock,
// and that every event is still delivered in order, the shutdown event last.
func TestListenerMayStopShutdownAndEnqueue(t *testing.T) {
	for _, call := range []string{"Stop", "Shutdown", "Enqueue"} {
		t.Run(call, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			b := batcher.New(1).WithEmitBatch()
			w := batcher.NewWatcher(func([]batcher.IOperation) {})
			done := make(chan error, 1)
			last := make(chan []string, 1)
			var seen []string // the notifier's only
			b.AddListener(func(event string, val int, msg string, md interface{}) {
				seen = append(seen, event)
				if event == batcher.ShutdownEvent {
					last <- seen
				}
				if event != batcher.BatchEvent || len(seen) > 1 {
					return
				}
				switch call {
				case "Stop":
					b.Stop()
					done <- nil
				case "Shutdown":
					done <- b.Shutdown(context.Background())
				case "Enqueue":
					// The buffer holds one operation: the first waits for
					// room that only the loop can make.
					err := b.Enqueue(batcher.NewOperation(w, 1, 1, false))
					if err == nil {
						err = b.Enqueue(batcher.NewOperation(w, 1, 2, false))
					}
					done <- err
				}
			})
			if err := b.Start(); err != nil {
				t.Fatal(err)
			}
			if err := b.Enqueue(batcher.NewOperation(w, 1, 0, false)); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("%s from a listener: %v", call, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s from a listener did not return", call)
			}
			b.Stop()
			// The listener that called Stop may still run: Stop waits for it
			// up to its grace; the shutdown event comes last all the same.
			select {
			case got := <-last:
				if got[0] != batcher.BatchEvent || got[len(got)-1] != batcher.ShutdownEvent {
					t.Fatalf("events %v: want the batch event first and the shutdown event last", got)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no shutdown event")
			}
		})
	}
}

// TestZeroValueBatcher checks that the zero value refuses to start with
// BufferNotAllocated instead of panicking, and that Stop and Shutdown on it
// return.
func TestZeroValueBatcher(t *testing.T) {
	var b batcher.Batcher
	if err := b.Start(); !errors.As(err, new(batcher.BufferNotAllocated)) {
		t.Fatalf("Start on the zero value: %v, want BufferNotAllocated", err)
	}
	w := batcher.NewWatcher(func([]batcher.IOperation) {})
	if err := b.Enqueue(batcher.NewOperation(w, 1, nil, true)); !errors.As(err, new(batcher.BufferNotAllocated)) {
		t.Fatalf("Enqueue on the zero value: %v, want BufferNotAllocated", err)
	}
	b.Flush()
	b.Pause()
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown on the zero value: %v", err)
	}
	b.Stop()
}

// TestNoGoroutineIdentity checks that no file of the package reads goroutine
// ids from stack traces.
func TestNoGoroutineIdentity(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(src), "runtime.Stack") {
			t.Errorf("%s reads runtime.Stack", f)
		}
	}
}

// TestStopWaitsForTheShutdownListener: Stop called from outside any
// listener returns only after the shutdown event's listener has returned,
// even when that listener is already running as the loop ends, so a log
// line written on shutdown is out before Stop returns. Which of Stop and
// the notifier gets there first is the scheduler's choice, so the test
// stops 50 batchers.
func TestStopWaitsForTheShutdownListener(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for i := 0; i < 50; i++ {
		b := batcher.NewBatcher()
		entered, gate := make(chan struct{}), make(chan struct{})
		var finished atomic.Bool
		b.AddListener(func(event string, _ int, _ string, _ interface{}) {
			if event != batcher.ShutdownEvent {
				return
			}
			close(entered)
			<-gate
			finished.Store(true)
		})
		if err := b.Start(); err != nil {
			t.Fatal(err)
		}
		stopped := make(chan struct{})
		go func() { b.Stop(); close(stopped) }()
		<-entered
		// The listener is running and held: a Stop that did not wait for
		// it returns now.
		select {
		case <-stopped:
			close(gate)
			t.Fatalf("batcher %d: Stop returned while the shutdown listener was still running", i)
		case <-time.After(20 * time.Millisecond):
		}
		close(gate)
		<-stopped
		if !finished.Load() {
			t.Fatalf("batcher %d: Stop returned before the shutdown listener did", i)
		}
	}
}

// TestStopRightAfterAListenerWaitsForTheDelivery checks that Stop, called
// from outside the listeners while one is still running, waits for it and
// returns with the shutdown event delivered: the listener signals the event,
// then keeps running for 20 ms, well inside Stop's 100-ms grace.
func TestStopRightAfterAListenerWaitsForTheDelivery(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	b := batcher.New(10)
	paused := make(chan struct{}, 1)
	var shutdowns atomic.Int32
	b.AddListener(func(event string, val int, msg string, md interface{}) {
		switch event {
		case batcher.PauseEvent:
			paused <- struct{}{}
			time.Sleep(20 * time.Millisecond)
		case batcher.ShutdownEvent:
			shutdowns.Add(1)
		}
	})
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	b.Pause()
	select {
	case <-paused:
	case <-time.After(10 * time.Second):
		t.Fatal("no pause event")
	}
	b.Stop()
	if n := shutdowns.Load(); n != 1 {
		t.Fatalf("%d shutdown events delivered when Stop returned, want 1", n)
	}
}
