package batcher_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/batchertest"
)

// TestPromisePauseSuspendsRequestsAndAudits: "Pause() suspends releases,
// capacity requests and audits for the pause time." The existing tests check
// releases only (TestPausedBatcherReleasesNothing).
//
// Every 100 ms of fake time the capacity and audit tickers fire. After each
// step the test waits until the loop has taken the ticks, then calls Pause
// again: the loop handles that Pause after the ticks, and events reach the
// listeners in the order the loop raised them, so once the pause event of a
// step is recorded, any request or audit event raised for that step's ticks
// is recorded too. The Pause calls also exercise the doubling: 500, 1000,
// 2000, then the default cap of 4000 ms, so the pause ends 4 s after the
// first Pause.
func TestPromisePauseSuspendsRequestsAndAudits(t *testing.T) {
	clk := newTrackedClock()
	lim := batchertest.NewLimiter(1000)
	b, rec := startedOn(t, clk, 100, func(b *batcher.Batcher) {
		b.WithRateLimiter(lim).WithAuditInterval(100 * time.Millisecond)
	})
	// With work buffered the request has a target to ask for.
	if err := b.Enqueue(batcher.NewOperation(batcher.NewWatcher(func([]batcher.IOperation) {}), 5, nil, true)); err != nil {
		t.Fatal(err)
	}
	origin := clk.Now()
	ctx := ctxTimeout(t)
	b.Pause()
	if _, ok := rec.WaitFor(ctx, batcher.PauseEvent, 1); !ok {
		t.Fatal("no pause event")
	}
	const steps = 39 // to 3.9 s, 100 ms before the pause ends
	for i := 1; i <= steps; i++ {
		clk.Advance(100 * time.Millisecond)
		clk.drained(t)
		b.Pause()
		if _, ok := rec.WaitFor(ctx, batcher.PauseEvent, i+1); !ok {
			t.Fatalf("no pause event for the Pause at %v", clk.Now().Sub(origin))
		}
	}
	var lengths []int
	for _, e := range rec.Events() {
		switch e.Name {
		case batcher.RequestEvent, batcher.AuditPassEvent, batcher.AuditSkipEvent, batcher.AuditFailEvent:
			t.Fatalf("%s event (val %d) by 3.9 s, within the pause that should last 4 s", e.Name, e.Val)
		case batcher.ResumeEvent:
			t.Fatal("resumed by 3.9 s, before the 4-s pause ended")
		case batcher.PauseEvent:
			lengths = append(lengths, e.Val)
		}
	}
	if got := fmt.Sprint(lengths[:5]); got != "[500 1000 2000 4000 4000]" {
		t.Fatalf("pause lengths %v ms, want 500, 1000, 2000 then 4000", lengths)
	}
	if n := len(lim.Targets()); n != 0 {
		t.Fatalf("GiveMe called %d times while paused", n)
	}
	// At 4 s the pause ends; requests and audits come back.
	clk.Advance(100 * time.Millisecond)
	evs, ok := rec.WaitFor(ctx, batcher.ResumeEvent, 1)
	if !ok || evs[0].Val != 4000 {
		t.Fatalf("resume events %+v, want one of 4000 ms", evs)
	}
	clk.Advance(100 * time.Millisecond)
	if _, ok := rec.WaitFor(ctx, batcher.RequestEvent, 1); !ok {
		t.Fatal("no request event after the pause")
	}
	waitFor(t, "an audit after the pause", func() bool {
		return countOf(rec, batcher.AuditPassEvent, batcher.AuditSkipEvent, batcher.AuditFailEvent) > 0
	})
}
