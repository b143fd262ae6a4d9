package batcher

import (
	"testing"
	"time"

	"github.com/costwise/batcher/internal/clock"
)

// workClock is a fake clock on which the loop's work takes time: every
// reading of the time moves it on by perRead. The loop reads it once per
// pass and once per chunk of operations it takes from the hand-over, so a
// long intake is as long on this clock as the operations it takes.
type workClock struct {
	*clock.Fake
	perRead time.Duration
}

func (c *workClock) Now() time.Time {
	c.Fake.Advance(c.perRead)
	return c.Fake.Now()
}

// TestLongIntakeReleasesNoBurst: capacity 10,000/s, 300,000 non-batchable
// operations of cost 10 enqueued before the loop starts, and an intake that
// takes about 1 µs per operation. No window up to 1 s releases more than
// capacity × window, one flush interval's worth, the tolerance below zero
// of a flush (see loop.affordable: 5 ms' worth here), the catch-up of a
// late wake-up (see credit.accrue: 2 ms' worth) and one operation, and
// each second after the first releases the capacity; the first release
// comes at the first flush at the latest. Under fair release the loop used to take
// the whole backlog in one pass (300 ms here, nothing released meanwhile),
// decide its first release with the time read before that, then decide
// again with the time after it, so two intervals' worth went within a
// millisecond.
func TestLongIntakeReleasesNoBurst(t *testing.T) {
	for _, fair := range []bool{true, false} {
		name := "in order"
		if fair {
			name = "fair"
		}
		t.Run(name, func(t *testing.T) {
			const capacity, cost, interval = 10000, 10, 100 * time.Millisecond
			h := newHarness(t, func(b *Batcher) {
				b.WithRateLimiter(NewProvisionedResource(capacity)).WithFlushInterval(interval)
				b.WithClock(&workClock{Fake: b.cfg.clock.(*clock.Fake), perRead: intakeChunk * time.Microsecond})
				if fair {
					b.WithFairRelease()
				}
			})
			h.enqueue(NewWatcher(noop), 300_000, cost, false)
			h.run(3 * time.Second)
			h.mu.Lock()
			first := h.releases[0].at
			h.mu.Unlock()
			// A flush releases what the loop holds; the harness's select may
			// let a few passes go before it picks the tick.
			if first > 2*interval {
				t.Errorf("first release at %v, later than the flush after the loop started", first)
			}
			t.Logf("first release at %v", first)
			for _, d := range []time.Duration{time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond, time.Second} {
				bound := uint64(capacity*(d+interval+5*time.Millisecond+maxCatchUp)/time.Second) + cost
				got := h.maxWindow(d)
				if got > bound {
					t.Errorf("a window of %v released %d cost, more than %d", d, got, bound)
				}
				t.Logf("window %v: at most %d cost (bound %d)", d, got, bound)
			}
			for s, got := range h.costPerSecond(3)[1:] {
				if r := float64(got) / capacity; r < 0.97 || r > 1.03 {
					t.Errorf("second %d: released %d cost, %.3f× capacity", s+1, got, r)
				}
			}
		})
	}
}
