package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/costwise/batcher"
	"google.golang.org/api/support/bundler"
)

// throughputGoal is the goal at default settings, in ops/s.
const throughputGoal = 2_000_000

// throughput measures end to end, from the first NewOperation in the
// producer's loop to the last callback: one producer, one watcher,
// MaxBatchSize 100, batchable operations of cost 1, no rate limiter and a
// trivial callback; beside it bundler doing the same job (count threshold
// 100, the same trivial handler), at default settings and with a 1 ms flush
// interval (bundler's DelayThreshold).
func (b *bench) throughput(ctx context.Context) {
	// A first, unmeasured pass of each grows the heap and warms the
	// scheduler, so the first measured case is not penalised.
	warm := max(b.plan.throughputOps/10, 10_000)
	if _, err := batcherThroughput(ctx, warm, 0); err != nil {
		b.logf("throughput warm-up: %v", err)
	}
	if _, err := bundlerThroughput(ctx, warm, 0); err != nil {
		b.logf("throughput warm-up (bundler): %v", err)
	}
	for _, flush := range []time.Duration{0, time.Millisecond} {
		ours, err := b.medianRate(ctx, func() (float64, error) { return batcherThroughput(ctx, b.plan.throughputOps, flush) })
		if err != nil {
			b.rep.add(result{Scenario: "throughput", Case: flushCase(flush), Status: statusError, Note: err.Error()})
			continue
		}
		peer, err := b.medianRate(ctx, func() (float64, error) { return bundlerThroughput(ctx, b.plan.throughputOps, flush) })
		row := result{
			Scenario: "throughput", Case: flushCase(flush), Ours: fmtRate(ours),
			Values: map[string]float64{"ops_per_s": ours, "bundler_ops_per_s": peer, "ops": float64(b.plan.throughputOps)},
		}
		if err != nil {
			row.Peer = "bundler failed: " + err.Error()
		} else {
			row.Peer = fmt.Sprintf("bundler %s (ours %.2f×)", fmtRate(peer), ours/peer)
		}
		// go-batcher is measured beside the batcher in bench/gobatcher, a
		// module of its own, so that it stays out of the main go.mod.
		row.GoBatcher = "measured in bench/gobatcher"
		if flush == 0 {
			row.Goal = "≥ 2M ops/s"
			row.Status = verdict(ours >= throughputGoal)
		} else {
			row.Status = statusInfo
		}
		row.Note = fmt.Sprintf("%d operations, median of %d run(s)", b.plan.throughputOps, b.plan.throughputRuns)
		b.rep.add(row)
		b.logf("throughput %s: %s, bundler %s", flushCase(flush), fmtRate(ours), fmtRate(peer))
	}
}

func flushCase(flush time.Duration) string {
	if flush == 0 {
		return "default settings"
	}
	return "flush interval " + flush.String()
}

// medianRate runs measure plan.throughputRuns times and returns the median.
func (b *bench) medianRate(ctx context.Context, measure func() (float64, error)) (float64, error) {
	var rates []float64
	for i := 0; i < b.plan.throughputRuns && ctx.Err() == nil; i++ {
		r, err := measure()
		if err != nil {
			return 0, err
		}
		rates = append(rates, r)
	}
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	return median(rates), nil
}

// batcherThroughput pushes n operations through a Batcher and returns ops/s.
// A zero flush keeps the default flush interval.
func batcherThroughput(ctx context.Context, n int, flush time.Duration) (float64, error) {
	bt := batcher.NewBatcher()
	if flush > 0 {
		bt.WithFlushInterval(flush)
	}
	var delivered atomic.Int64
	w := batcher.NewWatcher(func(ops []batcher.IOperation) { delivered.Add(int64(len(ops))) }).WithMaxBatchSize(100)
	if err := bt.Start(); err != nil {
		return 0, err
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		if err := bt.Enqueue(batcher.NewOperation(w, 1, nil, true)); err != nil {
			bt.Stop()
			return 0, fmt.Errorf("enqueue %d: %w", i, err)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := bt.Shutdown(sctx); err != nil {
		return 0, err
	}
	elapsed := time.Since(start)
	if got := delivered.Load(); got != int64(n) {
		return 0, fmt.Errorf("delivered %d of %d operations", got, n)
	}
	return float64(n) / elapsed.Seconds(), nil
}

// bundlerThroughput does the same job with bundler and returns ops/s.
func bundlerThroughput(ctx context.Context, n int, flush time.Duration) (float64, error) {
	var delivered atomic.Int64
	bd := bundler.NewBundler((*batcher.Operation)(nil), func(items interface{}) {
		delivered.Add(int64(len(items.([]*batcher.Operation))))
	})
	bd.BundleCountThreshold = 100
	if flush > 0 {
		bd.DelayThreshold = flush
	}
	w := batcher.NewWatcher(func([]batcher.IOperation) {})
	start := time.Now()
	for i := 0; i < n; i++ {
		op := batcher.NewOperation(w, 1, nil, true).(*batcher.Operation)
		if err := bd.AddWait(ctx, op, 1); err != nil {
			return 0, fmt.Errorf("bundler add %d: %w", i, err)
		}
	}
	bd.Flush()
	elapsed := time.Since(start)
	if got := delivered.Load(); got != int64(n) {
		return 0, fmt.Errorf("bundler delivered %d of %d operations", got, n)
	}
	return float64(n) / elapsed.Seconds(), nil
}
