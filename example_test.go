package batcher_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/batchertest"
)

// Example shows the whole flow: a rate limiter, a batcher, a watcher per
// request, operations enqueued, and a graceful shutdown that waits for every
// batch to be processed.
func Example() {
	limiter := batcher.NewProvisionedResource(1000) // cost units per second
	b := batcher.NewBatcher().WithRateLimiter(limiter)
	if err := b.Start(); err != nil {
		panic(err)
	}

	var mu sync.Mutex
	written := 0
	watcher := batcher.NewWatcher(func(batch []batcher.IOperation) {
		mu.Lock()
		written += len(batch) // write the batch to the datastore here
		mu.Unlock()
	}).WithMaxBatchSize(10).WithMaxAttempts(3)

	for i := 0; i < 25; i++ {
		op := batcher.NewOperation(watcher, 10, fmt.Sprintf("record-%d", i), true)
		if err := b.Enqueue(op); err != nil {
			panic(err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		panic(err)
	}
	fmt.Println("written:", written, "outstanding cost:", b.NeedsCapacity())
	// Output: written: 25 outstanding cost: 0
}

// ExampleBatcher_Pause shows the pause back-off: a Pause while paused
// doubles the pause, which is what a datastore answering 429 needs.
func ExampleBatcher_Pause() {
	clock := batchertest.NewFakeClock(time.Time{})
	b := batcher.New(100).WithClock(clock)
	rec := batchertest.NewRecorder()
	b.AddListener(rec.Listener())
	if err := b.Start(); err != nil {
		panic(err)
	}
	defer b.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b.Pause()
	rec.WaitFor(ctx, batcher.PauseEvent, 1)
	b.Pause() // still throttled
	rec.WaitFor(ctx, batcher.PauseEvent, 2)
	clock.Advance(time.Second)
	rec.WaitFor(ctx, batcher.ResumeEvent, 1)
	for _, e := range rec.Events() {
		fmt.Println(e.Name, e.Val)
	}
	// Output:
	// pause 500
	// pause 1000
	// resume 1000
}

// ExampleNewWatcher shows that each watcher gets only its own operations.
func ExampleNewWatcher() {
	b := batcher.NewBatcher()
	if err := b.Start(); err != nil {
		panic(err)
	}
	var mu sync.Mutex
	got := map[string][]string{}
	watcherFor := func(name string) batcher.IWatcher {
		return batcher.NewWatcher(func(batch []batcher.IOperation) {
			mu.Lock()
			defer mu.Unlock()
			for _, op := range batch {
				got[name] = append(got[name], op.Payload().(string))
			}
		})
	}
	a, z := watcherFor("a"), watcherFor("z")
	for _, p := range []string{"a1", "a2"} {
		_ = b.Enqueue(batcher.NewOperation(a, 1, p, true))
	}
	_ = b.Enqueue(batcher.NewOperation(z, 1, "z1", false))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = b.Shutdown(ctx)
	names := []string{}
	for n := range got {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Println(n, got[n])
	}
	// Output:
	// a [a1 a2]
	// z [z1]
}
