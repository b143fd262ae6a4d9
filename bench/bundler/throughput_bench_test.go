package bundler

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apibundler "google.golang.org/api/support/bundler"

	"github.com/costwise/batcher"
)

// BenchmarkThroughput measures end to end: from NewOperation in the
// producers' loops to the last callback, with 1, 4 and 16 producers, for the
// Batcher (no rate limiter, MaxBatchSize 100) and for bundler
// (BundleCountThreshold 100).
func BenchmarkThroughput(b *testing.B) {
	for _, producers := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("batcher/producers=%d", producers), func(b *testing.B) {
			bt := batcher.New(batcher.DefaultBufferSize)
			if err := bt.Start(); err != nil {
				b.Fatal(err)
			}
			var delivered atomic.Int64
			w := batcher.NewWatcher(func(ops []batcher.IOperation) { delivered.Add(int64(len(ops))) }).WithMaxBatchSize(100)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			produce(b.N, producers, func() error { return bt.Enqueue(batcher.NewOperation(w, 1, nil, true)) })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := bt.Shutdown(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if got := delivered.Load(); got != int64(b.N) {
				b.Fatalf("delivered %d of %d", got, b.N)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
		})
		b.Run(fmt.Sprintf("bundler/producers=%d", producers), func(b *testing.B) {
			var delivered atomic.Int64
			bd := apibundler.NewBundler((*batcher.Operation)(nil), func(items interface{}) {
				delivered.Add(int64(len(items.([]*batcher.Operation))))
			})
			bd.BundleCountThreshold = 100
			w := batcher.NewWatcher(func([]batcher.IOperation) {})
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			produce(b.N, producers, func() error {
				return bd.AddWait(ctx, batcher.NewOperation(w, 1, nil, true).(*batcher.Operation), 1)
			})
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
