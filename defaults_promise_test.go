package batcher_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/batchertest"
)

// These tests pin the defaults of the configuration table of docs/batcher.md
// with the numbers the document gives, not with the package's Default
// constants, so that a changed default fails them.

// TestPromiseDefaultBufferHolds10000: "NewBatcher() / NewBatcherWithBuffer(n)
// | buffer 10,000 | accepted operations not yet released; when full, Enqueue
// waits (or errors, below)".
func TestPromiseDefaultBufferHolds10000(t *testing.T) {
	b := batcher.NewBatcher().WithErrorOnFullBuffer()
	defer b.Stop()
	w := batcher.NewWatcher(func([]batcher.IOperation) {})
	for i := 0; i < 10000; i++ {
		if err := b.Enqueue(batcher.NewOperation(w, 1, i, true)); err != nil {
			t.Fatalf("operation %d of a default buffer refused: %v", i+1, err)
		}
	}
	if got := b.OperationsInBuffer(); got != 10000 {
		t.Fatalf("OperationsInBuffer = %d, want 10000", got)
	}
	err := b.Enqueue(batcher.NewOperation(w, 1, 10000, true))
	if !errors.As(err, new(batcher.BufferFullError)) {
		t.Fatalf("operation 10,001: %v, want BufferFullError", err)
	}
	if got := b.NeedsCapacity(); got != 10000 {
		t.Fatalf("target %d after a refused operation, want 10000", got)
	}
}

// TestPromiseDefaultFlushAndCapacityIntervals: "WithFlushInterval(d) | 100 ms
// | longest wait of a batch that is not full" and "WithCapacityInterval(d) |
// 100 ms | how often GiveMe(target) is called (with a request event)".
func TestPromiseDefaultFlushAndCapacityIntervals(t *testing.T) {
	clk := newTrackedClock()
	lim := batchertest.NewLimiter(1000)
	b, rec := startedOn(t, clk, 100, func(b *batcher.Batcher) { b.WithRateLimiter(lim) })
	br := newBarrier(clk, b)
	origin := clk.Now()
	c := &collector{}
	if err := b.Enqueue(batcher.NewOperation(c.watcher(), 3, "partial", true)); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Duration{0, 50 * time.Millisecond, 99 * time.Millisecond} {
		clk.Set(origin.Add(at))
		br.sync(t)
		if n := c.ops.Load(); n != 0 {
			t.Fatalf("a batch that is not full was released after %v, before the 100-ms flush interval", at)
		}
		if got := lim.Targets(); len(got) != 0 {
			t.Fatalf("GiveMe called %d times by %v, before the 100-ms capacity interval", len(got), at)
		}
		if n := rec.Count(batcher.RequestEvent); n != 0 {
			t.Fatalf("%d request events by %v", n, at)
		}
	}
	clk.Advance(time.Millisecond) // 100 ms
	waitFor(t, "the partial batch at 100 ms", func() bool { return c.ops.Load() == 1 })
	if _, ok := rec.WaitFor(ctxTimeout(t), batcher.RequestEvent, 1); !ok {
		t.Fatal("no request event at 100 ms")
	}
	if len(lim.Targets()) == 0 {
		t.Fatal("GiveMe not called at 100 ms")
	}
	// The second interval: one more request at 200 ms, not before.
	clk.Advance(99 * time.Millisecond)
	br.sync(t)
	if got := len(lim.Targets()); got != 1 {
		t.Fatalf("GiveMe called %d times by 199 ms, want 1", got)
	}
	clk.Advance(time.Millisecond)
	waitFor(t, "the second GiveMe at 200 ms", func() bool { return len(lim.Targets()) == 2 })
}

// TestPromiseDefaultAuditInterval: "WithAuditInterval(d) | 10 s | how often
// the target is audited"; each audit raises audit-pass, audit-skip or
// audit-fail.
func TestPromiseDefaultAuditInterval(t *testing.T) {
	clk := newTrackedClock()
	b, rec := startedOn(t, clk, 100, nil)
	br := newBarrier(clk, b)
	audits := func() int {
		return countOf(rec, batcher.AuditPassEvent, batcher.AuditSkipEvent, batcher.AuditFailEvent)
	}
	for round := 1; round <= 2; round++ {
		clk.Advance(10*time.Second - time.Millisecond)
		br.sync(t)
		// The barrier's releases happen before the audit is due; the
		// events of the loop are delivered in order, so a third barrier
		// pass is not needed to see the audits raised so far.
		if n := audits(); n != round-1 {
			t.Fatalf("%d audits by %v, want %d (one per 10 s)", n, time.Duration(round)*10*time.Second-time.Millisecond, round-1)
		}
		clk.Advance(time.Millisecond)
		waitFor(t, fmt.Sprintf("audit %d at %d s", round, 10*round), func() bool { return audits() == round })
	}
}

// TestPromiseDefaultMaxOperationTime: "WithMaxOperationTime(d) | 1 min | a
// batch counts as done after this even if its callback has not returned",
// and the target "shrinks when the batch's callback returns or its
// MaxOperationTime ... passes".
func TestPromiseDefaultMaxOperationTime(t *testing.T) {
	clk := newTrackedClock()
	b, _ := startedOn(t, clk, 100, nil)
	br := newBarrier(clk, b)
	origin := clk.Now()
	bl := newBlocker(t)
	if err := b.Enqueue(batcher.NewOperation(bl.w, 7, nil, false)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the callback to start", func() bool { return bl.started.Load() == 1 })
	for _, step := range []time.Duration{30 * time.Second, 29*time.Second + 999*time.Millisecond} {
		clk.Advance(step)
		br.sync(t)
		if got := b.NeedsCapacity(); got != 7 {
			t.Fatalf("target %d at %v with the callback still running, want 7 until 1 min", got, clk.Now().Sub(origin))
		}
	}
	clk.Advance(time.Millisecond) // 1 min after the release
	waitFor(t, "the target to drop at 1 min", func() bool { return b.NeedsCapacity() == 0 })
}

// TestPromiseDefaultMaxPauseTime: "A Pause while paused ... doubles the
// length (up to WithMaxPauseTime, default 8 × the pause time)"; the pause
// event's val is the pause length now in force, in ms.
func TestPromiseDefaultMaxPauseTime(t *testing.T) {
	cases := []struct {
		name      string
		configure func(b *batcher.Batcher)
		want      []int
	}{
		{"default pause time", nil, []int{500, 1000, 2000, 4000, 4000, 4000}},
		{"pause time 100 ms", func(b *batcher.Batcher) { b.WithPauseTime(100 * time.Millisecond) }, []int{100, 200, 400, 800, 800, 800}},
		{"max pause time 300 ms", func(b *batcher.Batcher) {
			b.WithPauseTime(100 * time.Millisecond).WithMaxPauseTime(300 * time.Millisecond)
		}, []int{100, 200, 300, 300, 300, 300}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := newTrackedClock()
			b, rec := startedOn(t, clk, 100, tc.configure)
			for i := range tc.want {
				b.Pause() // the fake clock stands still: every Pause comes while paused
				if _, ok := rec.WaitFor(ctxTimeout(t), batcher.PauseEvent, i+1); !ok {
					t.Fatalf("no pause event for Pause %d", i+1)
				}
			}
			var got []int
			for _, e := range rec.Named(batcher.PauseEvent) {
				got = append(got, e.Val)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("pause lengths %v ms, want %v", got, tc.want)
			}
			// The pause in force ends at its length after the first Pause.
			clk.Advance(time.Duration(tc.want[len(tc.want)-1])*time.Millisecond - time.Millisecond)
			clk.drained(t)
			if n := rec.Count(batcher.ResumeEvent); n != 0 {
				t.Fatalf("resumed before %d ms", tc.want[len(tc.want)-1])
			}
			clk.Advance(time.Millisecond)
			evs, ok := rec.WaitFor(ctxTimeout(t), batcher.ResumeEvent, 1)
			if !ok || evs[0].Val != tc.want[len(tc.want)-1] {
				t.Fatalf("resume events %+v, want one with val %d", evs, tc.want[len(tc.want)-1])
			}
		})
	}
}
