package batcher_test

import (
	"math"
	"testing"
	"time"

	"github.com/costwise/batcher"
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
			})
			// The starting credit (one flush interval's worth, 10 in both) pays
			// for every one of them.
			for i := 0; i < tc.charged; i++ {
				if err := b.Enqueue(batcher.NewOperation(w, 1, i, false)); err != nil {
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
