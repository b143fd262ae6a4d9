package batcher

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/api/support/bundler"

	"github.com/costwise/batcher/internal/clock"
)

// The benchmarks measure the Batcher with no rate limiter, a trivial
// callback and MaxBatchSize 100, beside google.golang.org/api/support/bundler
// doing the same job (count threshold 100, same trivial handler) in the same
// run, so that the ratio is meaningful on whatever machine runs them.

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

// BenchmarkThroughput measures end to end: from NewOperation in the
// producers' loops to the last callback, with 1, 4 and 16 producers.
func BenchmarkThroughput(b *testing.B) {
	for _, producers := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("batcher/producers=%d", producers), func(b *testing.B) {
			bt, w, delivered := startedBench(b)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			produce(b.N, producers, func() error { return bt.Enqueue(NewOperation(w, 1, nil, true)) })
			shutdownBench(b, bt)
			b.StopTimer()
			if got := delivered.Load(); got != int64(b.N) {
				b.Fatalf("delivered %d of %d", got, b.N)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
		})
		b.Run(fmt.Sprintf("bundler/producers=%d", producers), func(b *testing.B) {
			var delivered atomic.Int64
			bd := bundler.NewBundler((*Operation)(nil), func(items interface{}) {
				delivered.Add(int64(len(items.([]*Operation))))
			})
			bd.BundleCountThreshold = 100
			w := NewWatcher(func([]IOperation) {})
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			produce(b.N, producers, func() error { return bd.AddWait(ctx, NewOperation(w, 1, nil, true).(*Operation), 1) })
			bd.Flush()
			b.StopTimer()
			if got := delivered.Load(); got != int64(b.N) {
				b.Fatalf("delivered %d of %d", got, b.N)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
		})
	}
}

// produce runs n calls of add split across the given number of goroutines.
func produce(n, producers int, add func() error) {
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		share := n / producers
		if p == 0 {
			share += n % producers
		}
		wg.Add(1)
		go func(share int) {
			defer wg.Done()
			for i := 0; i < share; i++ {
				if err := add(); err != nil {
					panic(err)
				}
			}
		}(share)
	}
	wg.Wait()
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
		bt.incoming = append(bt.incoming, ops...) // as 10,000 Enqueue calls would leave it
		bt.buffered.Store(int64(len(ops)))
		bt.target.Store(int64(len(ops)))
		fc.Advance(DefaultFlushInterval)
		b.StartTimer()
		l.flush()
	}
}
