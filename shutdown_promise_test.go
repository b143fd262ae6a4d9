package batcher_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/costwise/batcher"
)

// TestPromiseShutdownDrainsWithinCapacity: "Shutdown(ctx) is the graceful
// path: it refuses new operations, keeps releasing the buffered ones within
// capacity (flushing partial batches at once), waits for running callbacks,
// then stops; it returns nil when everything was delivered". The existing
// test (TestShutdownDeliversEverything) gives a capacity that pays for
// everything at once. Here 30 operations of cost 10 wait at 100/s (3 s of
// capacity), in a partial batch of a watcher whose batches never fill:
// Shutdown refuses Enqueue at once, releases no faster than the capacity as
// the fake clock moves (within the starting interval's worth and one
// operation), and returns nil only once a callback that ran throughout
// ended.
func TestPromiseShutdownDrainsWithinCapacity(t *testing.T) {
	clk := newTrackedClock()
	b, _ := startedOn(t, clk, 100, func(b *batcher.Batcher) {
		b.WithRateLimiter(batcher.NewProvisionedResource(100))
	})
	c := &collector{}
	w := c.watcher().WithMaxBatchSize(1000)
	bl := newBlocker(t)
	// A callback that runs through the whole drain.
	if err := b.Enqueue(batcher.NewOperation(bl.w, 0, "running", false)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the running callback", func() bool { return bl.started.Load() == 1 })
	for i := 0; i < 30; i++ {
		if err := b.Enqueue(batcher.NewOperation(w, 10, i, true)); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- b.Shutdown(context.Background()) }()
	// Until Shutdown has begun, an operation is accepted and must be
	// delivered with the others; from then on every one is refused.
	total := int64(30)
	waitFor(t, "Shutdown to refuse new operations", func() bool {
		err := b.Enqueue(batcher.NewOperation(w, 10, "late", true))
		if err == nil {
			total++
			return false
		}
		return errors.As(err, new(batcher.BatcherStoppedError))
	})
	for i := 0; i < 10; i++ {
		if err := b.Enqueue(batcher.NewOperation(w, 10, "later", true)); !errors.As(err, new(batcher.BatcherStoppedError)) {
			t.Fatalf("Enqueue during Shutdown: %v, want BatcherStoppedError", err)
		}
	}
	origin := clk.Now()
	for c.ops.Load() < total {
		clk.Advance(100 * time.Millisecond)
		clk.drained(t)
		elapsed := clk.Now().Sub(origin)
		if elapsed > 10*time.Second {
			break
		}
		// Released cost so far, against 100/s since the start, the
		// starting interval's worth (10) and one operation (10).
		if got, most := 10*c.ops.Load(), int64(100*elapsed/time.Second)+10+10; got > most {
			t.Fatalf("%d cost released %v into Shutdown at 100/s, want at most %d", got, elapsed, most)
		}
	}
	waitFor(t, "every buffered operation", func() bool { return c.ops.Load() == total })
	// 10 × total cost at 100/s, less the starting interval's worth and one
	// operation, cannot have gone sooner.
	if elapsed, least := clk.Now().Sub(origin), time.Duration(10*total-20)*time.Second/100; elapsed < least {
		t.Fatalf("Shutdown delivered %d cost in %v at 100/s, want it to take at least %v", 10*total, elapsed, least)
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v while a callback still ran", err)
	default:
	}
	bl.release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v, want nil: everything was delivered", err)
		}
	case <-ctxTimeout(t).Done():
		t.Fatal("Shutdown did not return once the last callback ended")
	}
}
