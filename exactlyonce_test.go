package batcher_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costwise/batcher"
)

// TestExactlyOnceUnderStopRaces runs 64 producers with random costs,
// flushes and pauses against a Stop or a Shutdown at a random moment, and
// checks that every operation Enqueue accepted was either handed to its
// watcher once or is still counted as unreleased: accepted = dispatched +
// unreleased, every time.
func TestExactlyOnceUnderStopRaces(t *testing.T) {
	rounds := 12
	if testing.Short() {
		rounds = 3
	}
	for round := 0; round < rounds; round++ {
		rng := rand.New(rand.NewPCG(uint64(round), 64))
		var dispatched atomic.Int64
		w := batcher.NewWatcher(func(ops []batcher.IOperation) { dispatched.Add(int64(len(ops))) }).WithMaxBatchSize(20)
		b := batcher.New(500).WithRateLimiter(batcher.NewProvisionedResource(20000)).WithFlushInterval(5 * time.Millisecond)
		if err := b.Start(); err != nil {
			t.Fatal(err)
		}
		var accepted atomic.Int64
		var wg sync.WaitGroup
		for p := 0; p < 64; p++ {
			seed := rng.Uint64()
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, 1))
				for i := 0; i < 100; i++ {
					op := batcher.NewOperation(w, uint32(1+r.IntN(50)), nil, r.IntN(4) > 0)
					if b.Enqueue(op) == nil {
						accepted.Add(1)
					}
					switch r.IntN(50) {
					case 0:
						b.Flush()
					case 1:
						b.Pause()
					}
				}
			}()
		}
		time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
		if round%2 == 0 {
			b.Stop()
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(50))*time.Millisecond)
			_ = b.Shutdown(ctx)
			cancel()
		}
		wg.Wait()
		deadline := time.Now().Add(10 * time.Second)
		for b.Inflight() > 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond) // callbacks already running when Stop returned
		}
		a, d, u := accepted.Load(), dispatched.Load(), int64(b.OperationsInBuffer())
		if a != d+u {
			t.Fatalf("round %d: accepted %d, dispatched %d, unreleased %d: %d operations lost or doubled", round, a, d, u, a-d-u)
		}
	}
}
