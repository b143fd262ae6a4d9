package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/batchertest"
	"golang.org/x/time/rate"
)

// rateCase is one rate-accuracy configuration.
type rateCase struct {
	capacity   uint32
	cost       uint32
	flush      time.Duration
	flushEvery time.Duration // call Flush() this often; 0 never
	zero       bool          // capacity 0 behind a MaxCapacity of 1000
	goBatcher  string        // go-batcher v1.8.0's figure, when published
}

func (c rateCase) name() string {
	switch {
	case c.zero:
		return fmt.Sprintf("zero capacity, cost %d, flush %v", c.cost, c.flush)
	case c.flushEvery > 0:
		return fmt.Sprintf("capacity %d, cost %d, Flush() every %v", c.capacity, c.cost, c.flushEvery)
	}
	return fmt.Sprintf("capacity %d, cost %d, flush %v", c.capacity, c.cost, c.flush)
}

var rateCases = []rateCase{
	{capacity: 1000, cost: 10, flush: 100 * time.Millisecond, goBatcher: "1.10×"},
	{capacity: 1000, cost: 33, flush: 100 * time.Millisecond, goBatcher: "1.32×"},
	{capacity: 50, cost: 10, flush: 100 * time.Millisecond, goBatcher: "2.0×"},
	{capacity: 10000, cost: 1, flush: 100 * time.Millisecond},
	{capacity: 1000, cost: 10, flush: 10 * time.Millisecond},
	{capacity: 1000, cost: 10, flush: time.Millisecond, goBatcher: "8.9×"},
	{capacity: 1000, cost: 10, flush: 100 * time.Millisecond, flushEvery: time.Millisecond, goBatcher: "20–90×"},
	{zero: true, cost: 10, flush: 100 * time.Millisecond, goBatcher: "100 cost/s"},
}

// rateAccuracy keeps a backlog in a Batcher limited by a
// ProvisionedResource and measures the cost released per second against
// the capacity, over 1-s windows after the first second; beside it
// golang.org/x/time/rate paces the same operations with WaitN.
func (b *bench) rateAccuracy(ctx context.Context) {
	rows := make([]result, len(rateCases))
	var wg sync.WaitGroup
	for i, c := range rateCases {
		measure := func() {
			rows[i] = b.rateRow(ctx, c)
			b.logf("rate %s: %s; %s", c.name(), rows[i].Ours, rows[i].Peer)
		}
		if b.plan.rateParallel {
			wg.Add(1)
			go func() { defer wg.Done(); measure() }()
			continue
		}
		if ctx.Err() == nil {
			measure()
		}
	}
	wg.Wait()
	for _, row := range rows {
		if row.Scenario != "" {
			b.rep.add(row)
		}
	}
}

// rateRow measures one case, ours and the peer's at the same time.
func (b *bench) rateRow(ctx context.Context, c rateCase) result {
	row := result{Scenario: "rate accuracy", Case: c.name(), GoBatcher: c.goBatcher}
	var peer []float64
	var wg sync.WaitGroup
	if c.flushEvery == 0 {
		wg.Add(1)
		go func() { defer wg.Done(); peer = b.peerRate(ctx, c) }()
	}
	ours, err := b.batcherRate(ctx, c)
	wg.Wait()
	if err != nil {
		row.Status, row.Note = statusError, err.Error()
		return row
	}
	res := float64(c.cost) / (float64(max(c.capacity, 1)) * b.plan.rateWindow.Seconds())
	row.Values = map[string]float64{"windows": float64(len(ours)), "one_op_share_of_a_window": res}
	if c.zero {
		return zeroRow(row, ours, peer, b.plan.rateWindow)
	}
	mean, lo, hi := ratios(ours, c.capacity)
	row.Values["mean"], row.Values["min"], row.Values["max"] = mean, lo, hi
	row.Ours = fmt.Sprintf("%.3f× (min %.3f, max %.3f)", mean, lo, hi)
	row.Goal = "0.97–1.03× (mean, min, max)"
	row.Status = verdict(inRange(mean) && inRange(lo) && inRange(hi))
	if row.Status == statusMissed && inRange(mean) && hi-lo <= 2*res+0.06 {
		row.Note = fmt.Sprintf("the window extremes are one operation either way (one op is %.3f of a window's capacity): "+
			"releases happen on flush ticks, and when the credit turns positive just at a tick, timer jitter decides between that tick and the next", res)
	}
	switch {
	case c.flushEvery > 0:
		row.Peer = "n/a (nothing to flush)"
	case len(peer) == 0:
		row.Peer = "x/time/rate: no complete window"
	default:
		pm, pl, ph := ratios(peer, c.capacity)
		row.Values["peer_mean"], row.Values["peer_min"], row.Values["peer_max"] = pm, pl, ph
		row.Peer = fmt.Sprintf("x/time/rate %.3f× (min %.3f, max %.3f)", pm, pl, ph)
	}
	return row
}

// zeroRow fills the row of the zero-capacity case, where the measure is the
// cost released per second, which must be zero.
func zeroRow(row result, ours, peer []float64, window time.Duration) result {
	mean, _, hi := spread(ours)
	perSec := mean / window.Seconds()
	row.Values["cost_per_s"], row.Values["max_window_cost"] = perSec, hi
	row.Ours = fmt.Sprintf("%.0f cost/s (max window %.0f)", perSec, hi)
	row.Goal = "0 cost/s"
	row.Status = verdict(hi == 0)
	if len(peer) > 0 {
		pm, _, _ := spread(peer)
		row.Peer = fmt.Sprintf("x/time/rate %.0f cost/s", pm/window.Seconds())
	}
	return row
}

func inRange(r float64) bool { return r >= 0.97 && r <= 1.03 }

// ratios returns the mean, min and max of the window sums divided by the
// capacity (windows are one second long in every plan).
func ratios(windows []float64, capacity uint32) (mean, lo, hi float64) {
	mean, lo, hi = spread(windows)
	c := float64(capacity)
	return mean / c, lo / c, hi / c
}

// windowsOf returns the window sums of a rate run. The windows start half a
// flush interval past the warm-up so that their edges fall between flush
// ticks, where nothing is released; otherwise a release landing a
// microsecond either side of an edge would move one operation between two
// windows.
func (b *bench) windowsOf(log *windowLog, flush time.Duration) []float64 {
	from := b.plan.rateWarmup + flush/2
	return log.windows(from, b.plan.rateWindow, from+b.plan.rateRun-b.plan.rateWarmup)
}

// runLength is how long a rate run lasts: room for the warm-up and whole
// windows after the half-interval offset.
func (b *bench) runLength(flush time.Duration) time.Duration {
	return b.plan.rateRun + flush/2 + 20*time.Millisecond
}

// batcherRate runs the Batcher with a backlog for one run and returns the
// cost released in each window.
func (b *bench) batcherRate(ctx context.Context, c rateCase) ([]float64, error) {
	var limiter batcher.RateLimiter = batcher.NewProvisionedResource(c.capacity)
	if c.zero {
		l := batchertest.NewLimiter(0)
		l.SetMaxCapacity(1000) // so that Enqueue accepts the operations
		limiter = l
	}
	bt := batcher.New(batcher.DefaultBufferSize)
	bt.WithRateLimiter(limiter).WithFlushInterval(c.flush)
	start := time.Now()
	log := newWindowLog(start)
	w := batcher.NewWatcher(func(ops []batcher.IOperation) {
		now := time.Now()
		var cost float64
		for _, op := range ops {
			cost += float64(op.Cost())
		}
		log.add(now, cost)
	})
	if err := bt.Start(); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithDeadline(ctx, start.Add(b.runLength(c.flush)))
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	wg.Add(1)
	go func() { defer wg.Done(); errc <- keepBacklog(runCtx, bt, w, c.cost) }()
	if c.flushEvery > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); flushEvery(runCtx, bt, c.flushEvery) }()
	}
	<-runCtx.Done()
	bt.Stop()
	wg.Wait()
	if err := <-errc; err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return b.windowsOf(log, c.flush), nil
}

// keepBacklog enqueues operations until ctx ends; Enqueue blocks while the
// buffer is full, so the buffer stays full. It returns the first error that
// is not the end of the run.
func keepBacklog(ctx context.Context, bt *batcher.Batcher, w batcher.IWatcher, cost uint32) error {
	for ctx.Err() == nil {
		err := bt.EnqueueContext(ctx, batcher.NewOperation(w, cost, nil, true))
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("enqueue: %w", err)
		}
	}
	return nil
}

// flushEvery calls Flush every interval until ctx ends.
func flushEvery(ctx context.Context, bt *batcher.Batcher, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			bt.Flush()
		}
	}
}

// peerRate paces operations of the case's cost with x/time/rate's WaitN at
// rate capacity, burst capacity × flush interval (at least the cost), and
// returns the cost let through in each window.
func (b *bench) peerRate(ctx context.Context, c rateCase) []float64 {
	burst := max(int(float64(c.capacity)*c.flush.Seconds()), int(c.cost))
	lim := rate.NewLimiter(rate.Limit(c.capacity), burst)
	start := time.Now()
	log := newWindowLog(start)
	runCtx, cancel := context.WithDeadline(ctx, start.Add(b.runLength(c.flush)))
	defer cancel()
	for runCtx.Err() == nil {
		if err := lim.WaitN(runCtx, int(c.cost)); err != nil {
			// At rate zero WaitN fails at once once the burst is spent:
			// nothing more can pass until the run ends.
			<-runCtx.Done()
			break
		}
		log.add(time.Now(), float64(c.cost))
	}
	return b.windowsOf(log, c.flush)
}
