package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/costwise/batcher"
)

// latency measures Enqueue → callback for a lone operation, one at a time,
// on a Batcher at default settings without a rate limiter. A lone batchable
// operation waits, by design, for the next flush tick (or for its batch to
// fill, which a lone one never does), so it is enqueued at a random moment
// within the flush interval to sample every phase of the tick; a
// non-batchable one is released at once.
func (b *bench) latency(ctx context.Context) {
	cases := []struct {
		batchable bool
		n         int
		goal      string
		limit     time.Duration // the goal, applied to the p99
	}{
		{false, b.plan.latencyAlone, "p99 well under 1 ms", time.Millisecond},
		{true, b.plan.latencyBatchable, "p99 ≤ one flush interval (100 ms)", batcher.DefaultFlushInterval + 5*time.Millisecond},
	}
	for _, c := range cases {
		name := "lone non-batchable op"
		if c.batchable {
			name = "lone batchable op"
		}
		row := result{Scenario: "latency", Case: name, GoBatcher: "p50 49 ms, max 101 ms", Goal: c.goal}
		ds, err := loneLatencies(ctx, c.n, c.batchable)
		if err != nil {
			row.Status, row.Note = statusError, err.Error()
			b.rep.add(row)
			continue
		}
		p50, p99, hi := percentile(ds, 50), percentile(ds, 99), percentile(ds, 100)
		row.Ours = fmt.Sprintf("p50 %s, p99 %s, max %s", fmtDur(p50), fmtDur(p99), fmtDur(hi))
		row.Values = map[string]float64{"p50_ms": ms(p50), "p99_ms": ms(p99), "max_ms": ms(hi), "ops": float64(len(ds))}
		row.Status = verdict(p99 <= c.limit)
		row.Note = fmt.Sprintf("%d operations, one at a time", len(ds))
		if c.batchable {
			row.Note += ", each enqueued at a random phase of the flush tick, so the wait averages half an interval by design; the goal allows 5 ms over the interval for timer and scheduling delay"
		}
		b.rep.add(row)
		b.logf("latency %s: %s", name, row.Ours)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// loneLatencies enqueues n lone operations, each after the previous one's
// callback, and returns the time from each Enqueue call to its callback.
func loneLatencies(ctx context.Context, n int, batchable bool) ([]time.Duration, error) {
	done := make(chan time.Time, 1)
	w := batcher.NewWatcher(func([]batcher.IOperation) { done <- time.Now() }).WithMaxBatchSize(100)
	bt := batcher.NewBatcher()
	if err := bt.Start(); err != nil {
		return nil, err
	}
	defer bt.Stop()
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		if batchable {
			pause := time.Duration(rand.Int64N(int64(batcher.DefaultFlushInterval)))
			select {
			case <-time.After(pause):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		start := time.Now()
		if err := bt.Enqueue(batcher.NewOperation(w, 1, nil, batchable)); err != nil {
			return nil, fmt.Errorf("enqueue: %w", err)
		}
		select {
		case at := <-done:
			out = append(out, at.Sub(start))
		case <-time.After(5 * time.Second):
			return nil, fmt.Errorf("operation %d reached no callback within 5 s", i)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, nil
}
