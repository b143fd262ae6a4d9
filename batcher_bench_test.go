package batcher

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/clock"
)

// The benchmarks measure the Batcher with no rate limiter, a trivial
// callback and MaxBatchSize 100. The end-to-end throughput beside
// google.golang.org/api/support/bundler is in bench/bundler, a module of its
// own, so that bundler stays out of this module's requirements.

func startedBench(b *testing.B) (*Batcher, IWatcher, *atomic.Int64) {
	b.Helper()
	bt := New(DefaultBufferSize)
	if err := bt.Start(); err != nil {
		b.Fatal(err)
	}
	var delivered atomic.Int64
	w := NewWatcher(func(ops []IOperation) { delivered.Add(int64(len(ops))) }).WithMaxBatchSize(100)
	return bt, w, &delivered
}

func shutdownBench(b *testing.B, bt *Batcher) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := bt.Shutdown(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkEnqueue enqueues one pre-built operation over and over.
func BenchmarkEnqueue(b *testing.B) {
	bt, w, _ := startedBench(b)
	enqueueOneOp(b, bt, w)
}

// enqueueOneOp enqueues one operation of w b.N times into the started bt,
// then shuts bt down.
func enqueueOneOp(b *testing.B, bt *Batcher, w IWatcher) {
	op := NewOperation(w, 1, nil, true)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := bt.Enqueue(op); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	shutdownBench(b, bt)
}

// nopObserver is a BatchObserver that does nothing.
type nopObserver struct{}

func (nopObserver) ObserveBatch(int, uint64, time.Duration) {}

// BenchmarkEnqueueObserved is BenchmarkEnqueue with an observer set, so that
// Enqueue reads the clock for every operation.
func BenchmarkEnqueueObserved(b *testing.B) {
	bt := New(DefaultBufferSize).WithObserver(nopObserver{})
	if err := bt.Start(); err != nil {
		b.Fatal(err)
	}
	enqueueOneOp(b, bt, NewWatcher(func(ops []IOperation) {}).WithMaxBatchSize(100))
}

// BenchmarkNewOperationEnqueue creates each operation in the producer loop.
func BenchmarkNewOperationEnqueue(b *testing.B) {
	bt, w, _ := startedBench(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := bt.Enqueue(NewOperation(w, 1, nil, true)); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	shutdownBench(b, bt)
}

// BenchmarkFlushDecision measures one flush over 10,000 buffered operations
// of 100 watchers under a rate limiter that lets a tenth of them go: the
// cost of forming batches and deciding what the credit allows.
func BenchmarkFlushDecision(b *testing.B) {
	watchers := make([]IWatcher, 100)
	for i := range watchers {
		watchers[i] = NewWatcher(func([]IOperation) {})
	}
	ops := make([]IOperation, 10000)
	for i := range ops {
		ops[i] = NewOperation(watchers[i%len(watchers)], 1, nil, true)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		fc := clock.NewFake(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
		bt := New(uint32(len(ops))).WithClock(fc)
		bt.WithRateLimiter(NewProvisionedResource(10000))
		bt.state.Store(stateRunning)
		l := newLoop(bt)
		for _, op := range ops { // as 10,000 Enqueue calls would leave it
			bt.incoming.push(op.(*Operation), 0)
		}
		bt.buffered.Store(int64(len(ops)))
		bt.target.Store(int64(len(ops)))
		fc.Advance(DefaultFlushInterval)
		b.StartTimer()
		l.flush()
	}
}

// The three benchmarks below measure what Enqueue and the buffer cost in
// memory, on operations built beforehand as a producer would hold them: B/op
// and allocs/op must stay at 0 for Enqueue in every state, and the memory
// the batcher keeps per buffered operation at 16 bytes or less, what a
// channel of IOperation takes (one interface value). The hand-over holds
// one pointer, 8 bytes, per operation.

// benchOps returns n operations of cost 1 for one watcher.
func benchOps(n int) []IOperation {
	w := NewWatcher(func([]IOperation) {}).WithMaxBatchSize(100)
	ops := make([]IOperation, n)
	for i := range ops {
		ops[i] = NewOperation(w, 1, nil, true)
	}
	return ops
}

// BenchmarkEnqueueBeforeStart enqueues b.N operations into a batcher that
// was not started, whose buffer holds them all.
func BenchmarkEnqueueBeforeStart(b *testing.B) {
	ops := benchOps(b.N)
	bt := New(uint32(b.N) + 1)
	b.ReportAllocs()
	b.ResetTimer()
	for _, op := range ops {
		if err := bt.Enqueue(op); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEnqueueCapacityZero enqueues b.N operations into a started
// batcher whose limiter has capacity 0: the loop takes them into batches
// that never go, so its storage grows with every operation.
func BenchmarkEnqueueCapacityZero(b *testing.B) {
	ops := benchOps(b.N)
	bt := capacityZeroBatcher(b, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for _, op := range ops {
		if err := bt.Enqueue(op); err != nil {
			b.Fatal(err)
		}
	}
	waitSettled(bt)
}

// BenchmarkBufferedMemory reports the heap the batcher keeps per buffered
// operation (B/buffered-op), once its loop has taken 1,000,000 operations
// into batches that cannot go, measured from before the batcher was made.
func BenchmarkBufferedMemory(b *testing.B) {
	const n = 1_000_000
	ops := benchOps(n)
	var perOp float64
	for i := 0; i < b.N; i++ {
		before := heapInUse()
		bt := capacityZeroBatcher(b, n)
		for _, op := range ops {
			if err := bt.Enqueue(op); err != nil {
				b.Fatal(err)
			}
		}
		waitSettled(bt)
		perOp = float64(heapInUse()-before) / n
		bt.Stop()
	}
	b.ReportMetric(perOp, "B/buffered-op")
}

// capacityZeroBatcher starts a batcher with room for n operations behind a
// limiter of capacity 0 (maximum 1, so operations of cost 1 are accepted).
func capacityZeroBatcher(b *testing.B, n int) *Batcher {
	limiter := NewProvisionedResource(1)
	limiter.SetCapacity(0)
	bt := New(uint32(n) + 1).WithClock(clock.Real())
	bt.WithRateLimiter(limiter)
	if err := bt.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(bt.Stop)
	return bt
}

// waitSettled waits until the loop has stopped taking operations from the
// hand-over: it takes what it can hold and leaves the rest there.
func waitSettled(bt *Batcher) {
	last := bt.stats.enqueued.Load()
	for {
		time.Sleep(10 * time.Millisecond)
		now := bt.stats.enqueued.Load()
		if now == last && now > 0 {
			return
		}
		last = now
	}
}

// heapInUse returns the bytes of live heap objects after a collection.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
