package batcher_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/batchertest"
)

// gatedClock is a fake clock whose next Now, once armed, waits at a gate:
// the loop reads the clock first thing when it handles a Flush, so a test
// can hold the loop there while signals pile up behind it.
type gatedClock struct {
	*batchertest.FakeClock
	armed   atomic.Bool
	entered chan struct{}
	gate    chan struct{}
}

func (c *gatedClock) Now() time.Time {
	if c.armed.CompareAndSwap(true, false) {
		c.entered <- struct{}{}
		<-c.gate
	}
	return c.FakeClock.Now()
}

// TestPromisePauseAsThePauseEnds: "A Pause while paused, or within one pause
// time of the last resume, doubles the length", and the resume event, "length
// of the pause that ended", for a Pause that comes just as a pause ends: the
// pause's time has come, but the loop has not yet handled its timer when it
// gets the Pause (it was busy). The pause ended at its time, so the Pause is
// within one pause time of that resume and doubles the length, and the
// resume event comes first. The loop takes pending signals in random order,
// so the test makes the situation 20 times.
func TestPromisePauseAsThePauseEnds(t *testing.T) {
	for round := 0; round < 20; round++ {
		t.Run(fmt.Sprint("round ", round), func(t *testing.T) {
			clk := &gatedClock{
				FakeClock: batchertest.NewFakeClock(time.Time{}),
				entered:   make(chan struct{}),
				gate:      make(chan struct{}),
			}
			b, rec := startedOn(t, clk, 100, nil)
			ctx := ctxTimeout(t)
			b.Pause()
			if _, ok := rec.WaitFor(ctx, batcher.PauseEvent, 1); !ok {
				t.Fatal("no pause event")
			}
			// Hold the loop in a Flush; meanwhile the pause's time comes
			// (500 ms, the default) and a Pause is made.
			clk.armed.Store(true)
			b.Flush()
			<-clk.entered
			clk.Advance(500 * time.Millisecond)
			b.Pause()
			close(clk.gate)
			evs, ok := rec.WaitFor(ctx, batcher.PauseEvent, 2)
			if !ok {
				t.Fatal("no pause event for the second Pause")
			}
			if evs[1].Val != 1000 {
				t.Fatalf("a Pause as the 500-ms pause ended: length %d ms, want 1000 (within one pause time of its resume)", evs[1].Val)
			}
			var names []string
			for _, e := range rec.Events() {
				if e.Name == batcher.PauseEvent || e.Name == batcher.ResumeEvent {
					names = append(names, fmt.Sprint(e.Name, " ", e.Val))
				}
			}
			if got := fmt.Sprint(names[:3]); got != "[pause 500 resume 500 pause 1000]" {
				t.Fatalf("events %s, want [pause 500 resume 500 pause 1000]: the first pause's resume first", got)
			}
		})
	}
}
