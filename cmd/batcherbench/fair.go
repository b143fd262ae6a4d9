package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/costwise/batcher"
)

// fairCapacity is the capacity of the fair-release scenarios, cost per second.
const fairCapacity = 10000

// releaseLog records, from the watchers' callbacks, when each batch was
// handed over, for whom and at what cost (estimated and actual).
type releaseLog struct {
	mu    sync.Mutex
	start time.Time
	rows  []logged
}

type logged struct {
	at          time.Duration
	who         string
	cost, truth uint64
}

func newReleaseLog() *releaseLog { return &releaseLog{start: time.Now()} }

// reset forgets what was logged and restarts the clock.
func (r *releaseLog) reset() {
	r.mu.Lock()
	r.start, r.rows = time.Now(), nil
	r.mu.Unlock()
}

// watcher returns a watcher called name whose callback logs its batches;
// settle makes it report each operation's actual cost (its payload).
func (r *releaseLog) watcher(name string, settle bool) *batcher.Watcher {
	return batcher.NewWatcher(func(ops []batcher.IOperation) {
		var cost, truth uint64
		for _, op := range ops {
			cost += uint64(op.Cost())
			if actual, ok := op.Payload().(uint32); ok {
				truth += uint64(actual)
				if settle {
					op.(*batcher.Operation).SetActualCost(actual)
				}
			}
		}
		r.mu.Lock()
		r.rows = append(r.rows, logged{time.Since(r.start), name, cost, truth})
		r.mu.Unlock()
	}).(*batcher.Watcher).WithName(name)
}

// sum returns the cost logged for who (all when empty) in [from, to), and
// the time of the last such batch.
func (r *releaseLog) sum(who string, from, to time.Duration) (cost, truth uint64, last time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.rows {
		if (who == "" || x.who == who) && x.at >= from && x.at < to {
			cost += x.cost
			truth += x.truth
			last = max(last, x.at)
		}
	}
	return cost, truth, last
}

// fairBatcher returns a batcher of fairCapacity, with fair release or not,
// not started: the scenarios enqueue their backlogs first, so that how long
// enqueuing takes on a busy machine does not decide who goes first.
func fairBatcher(fair bool, size uint32) *batcher.Batcher {
	b := batcher.New(size)
	if fair {
		b.WithFairRelease()
	}
	b.WithRateLimiter(batcher.NewProvisionedResource(fairCapacity))
	return b
}

func enqueueN(b *batcher.Batcher, w batcher.IWatcher, n int, cost uint32) error {
	for i := 0; i < n; i++ {
		if err := b.Enqueue(batcher.NewOperation(w, cost, nil, true)); err != nil {
			return err
		}
	}
	return nil
}

// fairRelease runs the fair-release and settle scenarios.
func (b *bench) fairRelease(ctx context.Context) {
	for _, f := range []func(context.Context) (result, error){b.fairNewcomer, b.fairWeights, b.fairPriorities, b.settleRate} {
		row, err := f(ctx)
		if err != nil {
			row.Status, row.Note = statusError, err.Error()
		}
		row.Scenario = "fair release"
		b.logf("fair %s: %s", row.Case, row.Ours)
		b.rep.add(row)
	}
}

// fairNewcomer: A enqueues 100,000 operations of cost 10 at t=0, B 100 at
// t=1 s; in order and with fair release side by side.
func (b *bench) fairNewcomer(ctx context.Context) (result, error) {
	row := result{Case: "A: 100,000 ops of cost 10 at 0 s; B: 100 at 1 s; 10,000/s; B's last op released at (from B's enqueue + 1 s)",
		Goal: "≤ 1.25 s", GoBatcher: "after A's backlog, ~100 s"}
	wait := b.plan.fairRun
	var last [2]time.Duration // fair, in order
	var done [2]uint64
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i, fair := range []bool{true, false} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bt := fairBatcher(fair, 110_000)
			defer bt.Stop()
			log := newReleaseLog()
			a, bw := log.watcher("A", false), log.watcher("B", false)
			a.WithMaxBatchSize(10)
			bw.WithMaxBatchSize(10)
			if err := enqueueN(bt, a, 100_000, 10); err != nil {
				errs <- err
				return
			}
			if err := bt.Start(); err != nil {
				errs <- err
				return
			}
			log.reset()
			sleepCtx(ctx, time.Second)
			from := time.Since(log.start)
			if err := enqueueN(bt, bw, 100, 10); err != nil {
				errs <- err
				return
			}
			sleepCtx(ctx, wait)
			cost, _, at := log.sum("B", 0, time.Hour)
			// On a busy machine the second may be late: count from when B came.
			done[i], last[i] = cost, time.Second+at-from
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return row, err
	}
	row.Values = map[string]float64{"fair_last_s": last[0].Seconds(), "fair_b_cost": float64(done[0]),
		"fifo_b_cost": float64(done[1])}
	if done[0] < 1000 {
		row.Ours, row.Status = fmt.Sprintf("B released %d of 1000 cost in %v", done[0], wait+time.Second), statusMissed
	} else {
		row.Ours, row.Status = fmtDur(last[0]), verdict(last[0] <= 1250*time.Millisecond)
	}
	row.Peer = fmt.Sprintf("in order (the default): B released %d of 1000 cost by %v", done[1], wait+time.Second)
	if done[1] >= 1000 {
		row.Peer = "in order (the default): B done at " + fmtDur(last[1])
	}
	return row, nil
}

// fairWeights: eight watchers of weights 1..8, all backlogged.
func (b *bench) fairWeights(ctx context.Context) (result, error) {
	run := b.plan.fairLong
	row := result{Case: fmt.Sprintf("8 watchers of weights 1..8, all backlogged: worst share over %v", run),
		Goal: "each within ±5 % of its weighted share"}
	bt := fairBatcher(true, 200_000)
	defer bt.Stop()
	log := newReleaseLog()
	for i := 1; i <= 8; i++ {
		w := log.watcher(fmt.Sprint(i), false).WithWeight(uint32(i))
		w.WithMaxBatchSize(10)
		if err := enqueueN(bt, w, int(run.Seconds()+2)*fairCapacity/10*i/36*2, 10); err != nil {
			return row, err
		}
	}
	if err := bt.Start(); err != nil {
		return row, err
	}
	log.reset()
	sleepCtx(ctx, run)
	total, _, _ := log.sum("", 0, run)
	worst, parts := 1.0, []string{}
	for i := 1; i <= 8; i++ {
		got, _, _ := log.sum(fmt.Sprint(i), 0, run)
		r := float64(got) / (float64(total) * float64(i) / 36)
		if d := r - 1; d*d > (worst-1)*(worst-1) {
			worst = r
		}
		parts = append(parts, fmt.Sprintf("%.3f", r))
	}
	row.Ours = fmt.Sprintf("%.3f× its share (all: %s)", worst, strings.Join(parts, " "))
	row.Status = verdict(worst >= 0.95 && worst <= 1.05)
	row.Values = map[string]float64{"worst_ratio": worst, "total_cost": float64(total), "seconds": run.Seconds()}
	return row, nil
}

// fairPriorities: a high and a low watcher both backlogged.
func (b *bench) fairPriorities(ctx context.Context) (result, error) {
	highCost := int(b.plan.fairRun.Seconds() * fairCapacity / 2)
	row := result{Case: fmt.Sprintf("high (%d cost) and low both backlogged: high's share while its backlog lasts; low's gap after", highCost),
		Goal: "≥ 95 %; low resumes within one flush interval (100 ms)"}
	bt := fairBatcher(true, 100_000)
	defer bt.Stop()
	log := newReleaseLog()
	low := log.watcher("low", false).WithPriority(batcher.PriorityLow)
	low.WithMaxBatchSize(10)
	high := log.watcher("high", false)
	high.WithMaxBatchSize(10)
	if err := enqueueN(bt, low, highCost/10*2, 10); err != nil {
		return row, err
	}
	if err := enqueueN(bt, high, highCost/10, 10); err != nil {
		return row, err
	}
	if err := bt.Start(); err != nil {
		return row, err
	}
	log.reset()
	sleepCtx(ctx, b.plan.fairRun+time.Second)
	hi, _, end := log.sum("high", 0, time.Hour)
	lo, _, _ := log.sum("low", 0, end+1)
	log.mu.Lock()
	gap := time.Duration(-1)
	for _, x := range log.rows {
		if x.who == "low" && x.at > end {
			gap = x.at - end
			break
		}
	}
	log.mu.Unlock()
	share := float64(hi) / float64(hi+lo)
	row.Ours = fmt.Sprintf("high %s of %d cost until %s; low's next batch %s later", fmtPct(share), hi+lo, fmtDur(end), fmtDur(gap))
	row.Status = verdict(hi == uint64(highCost) && share >= 0.95 && gap >= 0 && gap <= 100*time.Millisecond)
	row.Values = map[string]float64{"high_share": share, "low_gap_s": gap.Seconds(), "high_end_s": end.Seconds()}
	return row, nil
}

// settleRate: estimates off by a random factor 0.5–2; the callback reports
// the actual cost, or not (the peer column).
func (b *bench) settleRate(ctx context.Context) (result, error) {
	run := b.plan.fairLong
	row := result{Case: fmt.Sprintf("estimates off by ×0.5–2 at random: actual cost per 1-s window ÷ capacity over %v", run),
		Goal: "within ±3 %"}
	var lo, hi [2]float64 // settled, on the estimates
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i, settle := range []bool{true, false} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bt := fairBatcher(false, 200_000)
			defer bt.Stop()
			log := newReleaseLog()
			w := log.watcher("w", settle)
			w.WithMaxBatchSize(10)
			rng := rand.New(rand.NewPCG(1, 2))
			for i := 0; i < int(run.Seconds()+2)*fairCapacity/10; i++ {
				actual := uint32(5 + rng.IntN(11))
				est := max(uint32(float64(actual)*(0.5+1.5*rng.Float64())+0.5), 1)
				if err := bt.Enqueue(batcher.NewOperation(w, est, actual, true)); err != nil {
					errs <- err
					return
				}
			}
			if err := bt.Start(); err != nil {
				errs <- err
				return
			}
			log.reset()
			sleepCtx(ctx, run+100*time.Millisecond)
			lo[i], hi[i] = 10, 0
			for s := time.Second; s < run; s += time.Second {
				_, truth, _ := log.sum("", s, s+time.Second)
				r := float64(truth) / fairCapacity
				lo[i], hi[i] = min(lo[i], r), max(hi[i], r)
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return row, err
	}
	row.Ours = fmt.Sprintf("%.3f–%.3f× with SetActualCost", lo[0], hi[0])
	row.Peer = fmt.Sprintf("%.3f–%.3f× on the estimates alone", lo[1], hi[1])
	row.Status = verdict(lo[0] >= 0.97 && hi[0] <= 1.03)
	row.Values = map[string]float64{"settled_min": lo[0], "settled_max": hi[0], "estimates_min": lo[1], "estimates_max": hi[1]}
	return row, nil
}
