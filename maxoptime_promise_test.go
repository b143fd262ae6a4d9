package batcher_test

import (
	"testing"
	"time"

	"github.com/costwise/batcher"
)

// TestPromiseMaxOperationTimeWatcherWins: the target "shrinks when the
// batch's callback returns or its MaxOperationTime (the watcher's, else the
// batcher's) passes, whichever is first", and in the configuration table "a
// watcher's own value wins" (watcher default 0: "the batcher's"). The only
// existing check (TestDeadlineLowersTarget) sets a watcher value shorter
// than the batcher's default; here the batcher's own setting is used, and a
// watcher value longer than it must win too.
func TestPromiseMaxOperationTimeWatcherWins(t *testing.T) {
	cases := []struct {
		name           string
		batcherLimit   time.Duration
		watcherLimit   time.Duration // 0: not set
		wantTargetDrop time.Duration
	}{
		{"batcher's value when the watcher has none", 2 * time.Second, 0, 2 * time.Second},
		{"watcher's shorter value", 5 * time.Second, 2 * time.Second, 2 * time.Second},
		{"watcher's longer value", 2 * time.Second, 5 * time.Second, 5 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := newTrackedClock()
			b, _ := startedOn(t, clk, 100, func(b *batcher.Batcher) { b.WithMaxOperationTime(tc.batcherLimit) })
			br := newBarrier(clk, b)
			bl := newBlocker(t)
			w := bl.w
			if tc.watcherLimit > 0 {
				w = w.WithMaxOperationTime(tc.watcherLimit)
			}
			if err := b.Enqueue(batcher.NewOperation(w, 7, nil, false)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the callback to start", func() bool { return bl.started.Load() == 1 })
			clk.Advance(tc.wantTargetDrop - time.Millisecond)
			br.sync(t)
			if got := b.NeedsCapacity(); got != 7 {
				t.Fatalf("target %d 1 ms before %v, with the callback still running: want 7", got, tc.wantTargetDrop)
			}
			clk.Advance(time.Millisecond)
			waitFor(t, "the target to drop at "+tc.wantTargetDrop.String(), func() bool { return b.NeedsCapacity() == 0 })
			// The callback returning later does not take the cost out twice:
			// another batch, of cost 3, runs (blocked, within its time) when
			// the first returns, and stays counted alone.
			other := newBlocker(t)
			if err := b.Enqueue(batcher.NewOperation(other.w, 3, nil, false)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the other callback to start", func() bool { return other.started.Load() == 1 })
			bl.release()
			waitFor(t, "the first batch to finish", func() bool { return b.Inflight() == 1 })
			if got := b.NeedsCapacity(); got != 3 {
				t.Fatalf("target %d after the late callback returned, want 3 (the other op only)", got)
			}
		})
	}
}
