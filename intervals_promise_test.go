package batcher_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/batchertest"
)

// TestPromiseConfiguredIntervals checks the configuration table's
// "WithFlushInterval(d) | longest wait of a batch that is not full",
// "WithCapacityInterval(d) | how often GiveMe(target) is called (with a
// request event)" and "WithAuditInterval(d) | how often the target is
// audited" with values other than the defaults (the existing
// TestPromiseDefault* tests check the defaults), and the Events table's
// "request | Batcher with a rate limiter": without one, no request event.
func TestPromiseConfiguredIntervals(t *testing.T) {
	const flush, capacity, audit = 250 * time.Millisecond, 40 * time.Millisecond, 3 * time.Second
	for _, limited := range []bool{true, false} {
		t.Run(fmt.Sprintf("rate limiter %v", limited), func(t *testing.T) {
			clk := newTrackedClock()
			lim := batchertest.NewLimiter(1000)
			b, rec := startedOn(t, clk, 100, func(b *batcher.Batcher) {
				b.WithFlushInterval(flush).WithCapacityInterval(capacity).WithAuditInterval(audit)
				if limited {
					b.WithRateLimiter(lim)
				}
			})
			br := newBarrier(clk, b)
			origin := clk.Now()
			at := func(d time.Duration) {
				t.Helper()
				clk.Set(origin.Add(d))
				br.sync(t)
			}
			c := &collector{}
			if err := b.Enqueue(batcher.NewOperation(c.watcher(), 3, "partial", true)); err != nil {
				t.Fatal(err)
			}
			requests := func() int { return rec.Count(batcher.RequestEvent) }
			audits := func() int {
				return countOf(rec, batcher.AuditPassEvent, batcher.AuditSkipEvent, batcher.AuditFailEvent)
			}

			// Capacity requests every 40 ms: 1 by 40 ms, 6 by 240 ms.
			at(capacity - time.Millisecond)
			if n := requests(); n != 0 || len(lim.Targets()) != 0 {
				t.Fatalf("%d request events (GiveMe %d times) by 39 ms, want 0", n, len(lim.Targets()))
			}
			at(capacity)
			if limited {
				waitFor(t, "a request at 40 ms", func() bool { return requests() == 1 && len(lim.Targets()) == 1 })
			}
			for k := 2; k <= 5; k++ { // a jump would merge ticks, as a real ticker drops them
				at(time.Duration(k) * capacity)
			}
			at(6*capacity - time.Millisecond)
			if limited {
				if n := requests(); n != 5 {
					t.Fatalf("%d request events by 239 ms, want 5 (one per 40 ms)", n)
				}
				if got := lim.Targets(); got[0] != 3 {
					t.Fatalf("GiveMe targets %v, want 3 (the cost of the partial batch) first", got)
				}
			}

			// The partial batch waits for the 250-ms flush, no longer.
			at(flush - time.Millisecond)
			if n := c.ops.Load(); n != 0 {
				t.Fatalf("a batch that is not full was released at 249 ms, before the 250-ms flush interval")
			}
			clk.Set(origin.Add(flush))
			waitFor(t, "the partial batch at 250 ms", func() bool { return c.ops.Load() == 1 })

			// Audits every 3 s.
			at(audit - time.Millisecond)
			if n := audits(); n != 0 {
				t.Fatalf("%d audits by 2.999 s, want 0", n)
			}
			clk.Set(origin.Add(audit))
			waitFor(t, "the audit at 3 s", func() bool { return audits() == 1 })
			at(2*audit - time.Millisecond)
			if n := audits(); n != 1 {
				t.Fatalf("%d audits by 5.999 s, want 1", n)
			}
			clk.Set(origin.Add(2 * audit))
			waitFor(t, "the audit at 6 s", func() bool { return audits() == 2 })

			if !limited {
				if n := requests(); n != 0 {
					t.Fatalf("%d request events from a batcher without a rate limiter, want 0", n)
				}
			}
		})
	}
}
