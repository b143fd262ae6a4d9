package batcher_test

import (
	"testing"
	"time"

	"github.com/costwise/batcher"
)

// The audit takes a target for a leak only once the last batch released
// stops counting: here a batch of a watcher whose MaxOperationTime (5 min)
// is longer than the batcher's (the default 1 min) still runs, and its cost
// stays in the target through the audits at 10 s to 90 s. Before the fix
// the audit at 60 s reset it (audit-fail, val 7), so that a shared
// resource was asked for less than the running work needed.
func TestAuditKeepsTargetOfLongerWatcherMaxOperationTime(t *testing.T) {
	clk := newTrackedClock()
	b, rec := startedOn(t, clk, 100, nil) // defaults: audit 10 s, MaxOperationTime 1 min
	origin := clk.Now()
	bl := newBlocker(t)
	w := bl.w.WithMaxOperationTime(5 * time.Minute)
	if err := b.Enqueue(batcher.NewOperation(w, 7, nil, false)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the callback to start", func() bool { return bl.started.Load() == 1 })
	// Step through the audits at 10, 20, ... 90 s, letting the loop handle
	// each before the next (no barrier operations here: a release would
	// count as recent and skip the audits).
	for i := 1; i <= 9; i++ {
		clk.Advance(10 * time.Second)
		at := clk.Now().Sub(origin)
		waitFor(t, "the audit at "+at.String(), func() bool {
			return countOf(rec, batcher.AuditPassEvent, batcher.AuditSkipEvent, batcher.AuditFailEvent) >= i
		})
		if got := b.NeedsCapacity(); got != 7 {
			fails := rec.Named(batcher.AuditFailEvent)
			t.Fatalf("at %v the target is %d, want 7: the callback still runs and its watcher's MaxOperationTime (5 min) has not passed; audit-fail events: %+v", at, got, fails)
		}
	}
}
