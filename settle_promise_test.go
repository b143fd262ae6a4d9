package batcher_test

import (
	"math"
	"testing"
	"time"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/batchertest"
)

// TestPromiseSettleDebtAtMostAMinute: "After the callback returns, the credit
// is charged the difference, or refunded it, so the rate the datastore sees
// is the capacity however wrong the estimates; a debt never exceeds a
// minute's worth of capacity." Operations of estimated cost 1 report the
// largest actual cost there is; the next operation then waits exactly a
// minute for the credit, not the 4 billion cost units reported.
func TestPromiseSettleDebtAtMostAMinute(t *testing.T) {
	cases := []struct {
		name     string
		capacity uint32
		flush    time.Duration // 0: the default
		charged  int           // operations reporting math.MaxUint32
	}{
		{"100/s, default flush interval", 100, 0, 1},
		{"1,000/s, 10-ms flush interval, 5 operations", 1000, 10 * time.Millisecond, 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			flush := batcher.DefaultFlushInterval
			if tc.flush > 0 {
				flush = tc.flush
			}
			clk := newTrackedClock()
			b, _ := startedOn(t, clk, 100, func(b *batcher.Batcher) {
				b.WithRateLimiter(batcher.NewProvisionedResource(tc.capacity))
				if tc.flush > 0 {
					b.WithFlushInterval(tc.flush)
				}
			})
			br := newBarrier(clk, b)
			charged := &collector{}
			w := batcher.NewWatcher(func(ops []batcher.IOperation) {
				for _, op := range ops {
					op.(*batcher.Operation).SetActualCost(math.MaxUint32)
				}
				charged.ops.Add(int64(len(ops)))
			}).WithMaxBatchSize(uint32(tc.charged))
			// One batch, which the starting credit (one flush interval's
			// worth, 10 in both) pays for; separate operations could see the
			// first one's report before they go.
			for i := 0; i < tc.charged; i++ {
				if err := b.Enqueue(batcher.NewOperation(w, 1, i, true)); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "the charged operations", func() bool { return charged.ops.Load() == int64(tc.charged) && b.Inflight() == 0 })
			br.sync(t) // the loop has settled them
			origin := clk.Now()

			next := &collector{}
			if err := b.Enqueue(batcher.NewOperation(next.watcher(), 1, "next", false)); err != nil {
				t.Fatal(err)
			}
			clk.Set(origin.Add(time.Minute - flush))
			br.sync(t)
			if n := next.ops.Load(); n != 0 {
				t.Fatalf("the next operation went %v after the settlement: the reported cost was not charged", time.Minute-flush)
			}
			clk.Set(origin.Add(time.Minute + 2*flush))
			waitFor(t, "the next operation a minute after the settlement", func() bool { return next.ops.Load() == 1 })
		})
	}
}

// TestPromiseTargetFollowsActualCosts: "The target that the batcher asks its
// rate limiter for (NeedsCapacity) is scaled by the ratio of actual to
// estimated cost over the last second or so of settled cost
// (Stats().CostRatio) ... Operations that report nothing are settled at their
// estimate." Ten operations of cost 10 report 3×, 0.5× or nothing; then 50
// more of cost 10 are outstanding (their callbacks blocked), and the next
// capacity request asks for 1,500, 250 or 500.
func TestPromiseTargetFollowsActualCosts(t *testing.T) {
	cases := []struct {
		name   string
		factor float64 // 0: no report
		ratio  float64
		want   uint32
	}{
		{"actual 3 times the estimate", 3, 3, 1500},
		{"actual half the estimate", 0.5, 0.5, 250},
		{"nothing reported", 0, 1, 500},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := newTrackedClock()
			lim := batchertest.NewLimiter(2000)
			b, rec := startedOn(t, clk, 100, func(b *batcher.Batcher) { b.WithRateLimiter(lim) })
			br := newBarrier(clk, b)
			reported := &collector{}
			w := batcher.NewWatcher(func(ops []batcher.IOperation) {
				for _, op := range ops {
					if tc.factor > 0 {
						op.(*batcher.Operation).SetActualCost(uint32(float64(op.Cost()) * tc.factor))
					}
				}
				reported.ops.Add(int64(len(ops)))
			}).WithMaxBatchSize(10)
			// One batch of 100, which the starting credit (200 at 2,000/s)
			// pays for; separate operations could see the first one's
			// report before they go.
			for i := 0; i < 10; i++ {
				if err := b.Enqueue(batcher.NewOperation(w, 10, i, true)); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "the reporting operations", func() bool { return reported.ops.Load() == 10 && b.Inflight() == 0 })
			br.sync(t) // the loop has settled them
			if got := b.Stats().CostRatio; got != tc.ratio {
				t.Fatalf("Stats().CostRatio = %v, want %v", got, tc.ratio)
			}
			bl := newBlocker(t)
			for i := 0; i < 50; i++ {
				if err := b.Enqueue(batcher.NewOperation(bl.w, 10, i, false)); err != nil {
					t.Fatal(err)
				}
			}
			if got := b.NeedsCapacity(); got != tc.want {
				t.Fatalf("NeedsCapacity() = %d with 500 of estimated cost outstanding, want %d", got, tc.want)
			}
			clk.Advance(batcher.DefaultCapacityInterval)
			evs, ok := rec.WaitFor(ctxTimeout(t), batcher.RequestEvent, 1)
			if !ok || evs[0].Val != int(tc.want) {
				t.Fatalf("request events %+v, want one with val %d", evs, tc.want)
			}
			if got := lim.Targets(); len(got) != 1 || got[0] != tc.want {
				t.Fatalf("GiveMe targets %v, want [%d]", got, tc.want)
			}
		})
	}
}
