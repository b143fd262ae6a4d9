package batcher_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/batchertest"
)

// fairTenants are named watchers under fair release. The order of release
// is read from batch events (WithEmitBatch), which listeners get in the order
// the loop released the batches; the callbacks, each on a goroutine of its
// own, count what was delivered.
type fairTenants struct {
	mu        sync.Mutex
	released  map[string][]int // payloads in release order
	delivered map[string]int   // operations handed to callbacks
	watchers  []*batcher.Watcher
}

func newFairTenants(maxBatch uint32, weights ...uint32) *fairTenants {
	ft := &fairTenants{released: map[string][]int{}, delivered: map[string]int{}}
	for i, wt := range weights {
		name := fmt.Sprint("tenant-", i)
		w := batcher.NewWatcher(func(ops []batcher.IOperation) {
			ft.mu.Lock()
			ft.delivered[name] += len(ops)
			ft.mu.Unlock()
		}).(*batcher.Watcher).WithWeight(wt).WithName(name)
		w.WithMaxBatchSize(maxBatch)
		ft.watchers = append(ft.watchers, w)
	}
	return ft
}

// configure turns on fair release and batch events, and listens to them.
func (ft *fairTenants) configure(b *batcher.Batcher) {
	b.WithFairRelease().WithEmitBatch()
	b.AddListener(func(event string, _ int, _ string, md interface{}) {
		if event != batcher.BatchEvent {
			return
		}
		ft.mu.Lock()
		defer ft.mu.Unlock()
		for _, op := range md.([]batcher.IOperation) {
			name := op.Watcher().(*batcher.Watcher).Name()
			ft.released[name] = append(ft.released[name], op.Payload().(int))
		}
	})
}

func (ft *fairTenants) enqueue(t *testing.T, b batcher.IBatcher, perWatcher int, cost uint32) {
	t.Helper()
	for i := 0; i < perWatcher; i++ {
		for _, w := range ft.watchers {
			if err := b.Enqueue(batcher.NewOperation(w, cost, i, true)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// check fails unless every watcher's operations 0..perWatcher-1 were
// released exactly once, in order, and handed to its callback. Call it once
// the shutdown event has been recorded: every batch event came before it.
func (ft *fairTenants) check(t *testing.T, perWatcher int) {
	t.Helper()
	ft.mu.Lock()
	defer ft.mu.Unlock()
	for _, w := range ft.watchers {
		got := ft.released[w.Name()]
		if len(got) != perWatcher || ft.delivered[w.Name()] != perWatcher {
			t.Fatalf("%s: %d released, %d delivered, of its %d operations", w.Name(), len(got), ft.delivered[w.Name()], perWatcher)
		}
		for i, p := range got {
			if p != i {
				t.Fatalf("%s released operation %d at position %d: order or exactly-once broken", w.Name(), p, i)
			}
		}
	}
}

// TestPromiseShutdownUnderFairRelease: "Shutdown(ctx) is the graceful path:
// it refuses new operations, keeps releasing the buffered ones within
// capacity (flushing partial batches at once), waits for running callbacks,
// then stops; it returns nil when everything was delivered". Every existing
// Shutdown test runs in order (the default); here the same promise is
// checked with WithFairRelease, where several watchers with work ready get
// their batches cut into pieces.
func TestPromiseShutdownUnderFairRelease(t *testing.T) {
	t.Run("within the starting credit: partial batches go without a flush tick", func(t *testing.T) {
		clk := newTrackedClock()
		// 10,000/s and a 100-ms flush interval: the batcher starts with
		// 1,000 of credit. 3 × 50 ops of cost 2 = 300, in unfinished batches
		// (MaxBatchSize 1,000) that only a flush or the drain can close.
		ft := newFairTenants(1000, 1, 2, 3)
		b, rec := startedOn(t, clk, 1000, func(b *batcher.Batcher) {
			ft.configure(b)
			b.WithRateLimiter(batcher.NewProvisionedResource(10000))
		})
		ft.enqueue(t, b, 50, 2)
		// The fake clock never moves: no flush tick ever fires.
		if err := b.Shutdown(ctxTimeout(t)); err != nil {
			t.Fatalf("Shutdown: %v, want nil", err)
		}
		if _, ok := rec.WaitFor(ctxTimeout(t), batcher.ShutdownEvent, 1); !ok {
			t.Fatal("no shutdown event")
		}
		ft.check(t, 50)
		if n := b.OperationsInBuffer(); n != 0 {
			t.Fatalf("OperationsInBuffer after Shutdown = %d", n)
		}
	})

	t.Run("beyond the starting credit: released within capacity", func(t *testing.T) {
		clk := newTrackedClock()
		origin := clk.Now()
		// 3 × 50 ops of cost 10 = 1,500 against 1,000 of starting credit:
		// the last 500 need 50 ms at 10,000/s.
		ft := newFairTenants(20, 1, 1, 1)
		var mu sync.Mutex
		var worst time.Duration // the most any release ran ahead of the credit, in time at 10,000/s
		var cost int
		b, rec := startedOn(t, clk, 1000, func(b *batcher.Batcher) {
			ft.configure(b)
			b.WithRateLimiter(batcher.NewProvisionedResource(10000))
			// A batch event reaches the listener at or after the fake time
			// of its release, so this underestimates how early it went:
			// a release it finds ahead of the credit really was.
			b.AddListener(func(event string, val int, _ string, _ interface{}) {
				if event != batcher.BatchEvent {
					return
				}
				at := clk.Now().Sub(origin)
				mu.Lock()
				defer mu.Unlock()
				cost += 10 * val
				// Credit by then: 1,000 to start with, 10 per ms since.
				ahead := time.Duration(cost-1000)*100*time.Microsecond - at
				worst = max(worst, ahead)
			})
		})
		ft.enqueue(t, b, 50, 10)
		done := make(chan error, 1)
		go func() { done <- b.Shutdown(context.Background()) }()
		var err error
		for finished := false; !finished; {
			select {
			case err = <-done:
				finished = true
			default:
				if clk.Now().Sub(origin) > 10*time.Second {
					t.Fatal("Shutdown did not return within 10 s of fake time")
				}
				clk.Advance(time.Millisecond)
				clk.drained(t)
				// A yield so that the loop, the callbacks and Shutdown keep
				// up with the fake clock; the fake clock sets the pace.
				time.Sleep(100 * time.Microsecond)
			}
		}
		if err != nil {
			t.Fatalf("Shutdown: %v, want nil", err)
		}
		if _, ok := rec.WaitFor(ctxTimeout(t), batcher.ShutdownEvent, 1); !ok {
			t.Fatal("no shutdown event")
		}
		ft.check(t, 50)
		// The drain may run a few milliseconds' worth below zero (the flush
		// tolerance, at most 5 ms) and by less than one operation (1 ms).
		mu.Lock()
		defer mu.Unlock()
		if worst > 6*time.Millisecond {
			t.Fatalf("a release ran %v ahead of the credit at 10,000/s: faster than the capacity", worst)
		}
		if took := clk.Now().Sub(origin); took < 44*time.Millisecond {
			t.Fatalf("1,500 cost delivered by %v of fake time at 10,000/s with 1,000 of credit: faster than the capacity", took)
		}
	})

	t.Run("Stop reports what is left", func(t *testing.T) {
		lim := batchertest.NewLimiter(0)
		lim.SetMaxCapacity(100)
		clk := newTrackedClock()
		ft := newFairTenants(4, 1, 2, 3)
		b, rec := startedOn(t, clk, 1000, func(b *batcher.Batcher) {
			ft.configure(b)
			b.WithRateLimiter(lim)
		})
		ft.enqueue(t, b, 10, 1) // full batches of 4 and partial ones, none affordable
		b.Stop()
		evs, ok := rec.WaitFor(ctxTimeout(t), batcher.ShutdownEvent, 1)
		if !ok || len(evs) != 1 || evs[0].Val != 30 {
			t.Fatalf("shutdown events %+v, want one with val 30", evs)
		}
		if n := b.OperationsInBuffer(); n != 30 {
			t.Fatalf("OperationsInBuffer after Stop = %d, want 30", n)
		}
		ft.check(t, 0)
	})
}
