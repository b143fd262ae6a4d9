package batcher_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/costwise/batcher"
)

// TestPromiseCreditStartsAndCapsAtOneInterval: "The batcher's credit grows at
// that rate, capped at one flush interval's worth (capacity × flush
// interval), so idle time banks no burst. An operation of positive cost may
// go while the credit is positive; its cost is then subtracted ... A new
// batcher starts with one interval's worth." The existing test
// (TestFirstOpGoesAtOnceUnderALimiter) covers the start at the defaults.
//
// With an interval's worth W and operations of cost c, a full credit
// releases ceil(W / c) operations at the start; after ten seconds without
// a release, at least as many and no more than W, the flush tolerance and
// one operation.
func TestPromiseCreditStartsAndCapsAtOneInterval(t *testing.T) {
	cases := []struct {
		capacity uint32
		flush    time.Duration // 0: the default 100 ms
		cost     uint32
		worth    int // capacity × flush interval
	}{
		{100, 0, 3, 10},
		{100, time.Second, 3, 100},
		{10000, 10 * time.Millisecond, 7, 100},
		{1000, 0, 100, 100}, // one operation costs the whole interval's worth
	}
	for _, tc := range cases {
		flush := batcher.DefaultFlushInterval
		if tc.flush > 0 {
			flush = tc.flush
		}
		t.Run(fmt.Sprintf("%d per s, flush %v, cost %d", tc.capacity, flush, tc.cost), func(t *testing.T) {
			clk := newTrackedClock()
			b, _ := startedOn(t, clk, 1000, func(b *batcher.Batcher) {
				b.WithRateLimiter(batcher.NewProvisionedResource(tc.capacity))
				if tc.flush > 0 {
					b.WithFlushInterval(tc.flush)
				}
			})
			br := newBarrier(clk, b)
			c := &collector{}
			w := c.watcher()
			for i := 0; i < 500; i++ {
				if err := b.Enqueue(batcher.NewOperation(w, tc.cost, i, false)); err != nil {
					t.Fatal(err)
				}
			}
			perInterval := int64((tc.worth + int(tc.cost) - 1) / int(tc.cost))
			waitFor(t, "the starting credit's operations", func() bool { return c.ops.Load() >= perInterval })
			br.sync(t)
			if n := c.ops.Load(); n != perInterval {
				t.Fatalf("a new batcher released %d operations of cost %d, want ceil(%d / %d) = %d (one interval's worth)",
					n, tc.cost, tc.worth, tc.cost, perInterval)
			}
			// Ten seconds without a release: the credit is full, and no
			// more. The release at the flush that follows may use the flush
			// tolerance; the model's bound after a stall allows one
			// interval's worth, the tolerance and the catch-up ("together
			// at most 7 ms' worth") and one operation.
			clk.Advance(10 * time.Second)
			waitFor(t, "the releases after ten seconds", func() bool { return c.ops.Load() >= 2*perInterval })
			br.sync(t)
			released := (c.ops.Load() - perInterval) * int64(tc.cost)
			most := int64(tc.worth) + int64(tc.capacity)*7/1000 + int64(tc.cost)
			if released > most {
				t.Fatalf("ten seconds without a release then released cost %d at once, want at most %d "+
					"(one interval's worth %d + 7 ms' worth + one operation): idle time banked a burst", released, most, tc.worth)
			}
		})
	}
}
