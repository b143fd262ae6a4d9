package adaptive_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/adaptive"
	"github.com/costwise/batcher/batchertest"
)

// TestPromiseAdaptiveOverProvisioned checks the section "Capacity that
// learns from throttling" of docs/batcher.md with the limiter a user wraps
// (a ProvisionedResource of 10,000, not a stand-in), at the defaults and
// with every setting changed: "each 429 ... multiplies the fraction by 0.9
// (WithDecrease); without throttling it grows back by 1 % of the inner
// capacity per second (WithIncrease), in 250 ms steps (WithStep), never
// above the inner capacity and never below 5 % (WithMinFraction). Reports
// within one second after a decrease (WithCooldown) ... are one episode and
// lower it once. MaxCapacity stays the inner one, so nothing is refused
// while the fraction is low". The existing tests check the floor with 0.2
// only, on a stand-in inner limiter.
func TestPromiseAdaptiveOverProvisioned(t *testing.T) {
	cases := []struct {
		name      string
		configure func(l *adaptive.Limiter)
		decrease  float64
		cooldown  time.Duration
		step      time.Duration
		perStep   uint32 // growth per step, of 10,000
		floor     uint32
	}{
		{"defaults", nil, 0.9, time.Second, 250 * time.Millisecond, 25, 500},
		{"every setting changed", func(l *adaptive.Limiter) {
			l.WithDecrease(0.5).WithCooldown(3 * time.Second).WithIncrease(0.1).WithStep(time.Second).WithMinFraction(0.2)
		}, 0.5, 3 * time.Second, time.Second, 1000, 2000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
			clk := batchertest.NewFakeClock(start)
			l := adaptive.New(batcher.NewProvisionedResource(10000)).WithClock(clk)
			if tc.configure != nil {
				tc.configure(l)
			}
			ctx := context.Background()
			if err := l.Provision(ctx); err != nil {
				t.Fatal(err)
			}
			if err := l.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer l.Stop()
			b := batcher.NewBatcherWithBuffer(10).WithRateLimiter(l)
			defer b.Stop()
			w := batcher.NewWatcher(func([]batcher.IOperation) {})

			if got := l.Capacity(); got != 10000 {
				t.Fatalf("Capacity() = %d before any throttling, want the inner 10,000", got)
			}
			l.Throttled(0)
			want := uint32(10000 * tc.decrease)
			if got := l.Capacity(); got != want {
				t.Fatalf("after one 429: Capacity() = %d, want %d (× %v)", got, want, tc.decrease)
			}
			clk.Advance(tc.cooldown - time.Millisecond)
			l.Throttled(0)
			if got := l.Capacity(); got != want {
				t.Fatalf("a 429 within the cooldown lowered the capacity to %d, want %d (one episode)", got, want)
			}
			// One episode after another, each just past the cooldown: the
			// fraction falls to the floor, and no lower.
			for i := 0; i < 60; i++ {
				clk.Advance(tc.cooldown + time.Millisecond)
				l.Throttled(0)
				if got := l.Capacity(); got < tc.floor {
					t.Fatalf("Capacity() = %d after %d episodes, below the floor %d", got, i+2, tc.floor)
				}
			}
			if got := l.Capacity(); got != tc.floor {
				t.Fatalf("Capacity() = %d after 61 episodes, want the floor %d", got, tc.floor)
			}
			if got := l.MaxCapacity(); got != 10000 {
				t.Fatalf("MaxCapacity() = %d at the floor, want the inner 10,000", got)
			}
			if err := b.Enqueue(batcher.NewOperation(w, 10000, nil, false)); err != nil {
				t.Fatalf("an operation of the inner capacity refused at the floor: %v", err)
			}
			if err := b.Enqueue(batcher.NewOperation(w, 10001, nil, false)); !errors.As(err, new(batcher.TooExpensiveError)) {
				t.Fatalf("an operation above the inner capacity: %v, want TooExpensiveError", err)
			}

			// Growth: none during the cooldown, then perStep every step.
			clk.Advance(tc.cooldown)
			if got := l.Capacity(); got != tc.floor {
				t.Fatalf("Capacity() = %d when the cooldown ends, want %d (no growth during it)", got, tc.floor)
			}
			clk.Advance(tc.step - time.Millisecond)
			if got := l.Capacity(); got != tc.floor {
				t.Fatalf("Capacity() = %d before a whole step, want %d", got, tc.floor)
			}
			clk.Advance(time.Millisecond)
			if got := l.Capacity(); got != tc.floor+tc.perStep {
				t.Fatalf("Capacity() = %d after one step, want %d", got, tc.floor+tc.perStep)
			}
			clk.Advance(3 * tc.step)
			if got := l.Capacity(); got != tc.floor+4*tc.perStep {
				t.Fatalf("Capacity() = %d after four steps, want %d", got, tc.floor+4*tc.perStep)
			}
			clk.Advance(time.Hour)
			if got := l.Capacity(); got != 10000 {
				t.Fatalf("Capacity() = %d an hour later, want the inner 10,000 and never above", got)
			}
		})
	}
}

// TestPromiseAdaptiveLearnsFromBatcherPause: "each 429, reported with
// limiter.Throttled(retryAfter) or through the batcher's Pause
// (b.AddListener(limiter.Listener())), multiplies the fraction by 0.9", with
// a running Batcher on the limiter and Pause called as a user's callback
// would on a 429; two Pauses within the cooldown are one episode. The
// existing test calls the listener by hand.
func TestPromiseAdaptiveLearnsFromBatcherPause(t *testing.T) {
	clk := batchertest.NewFakeClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	l := adaptive.New(batcher.NewProvisionedResource(10000)).WithClock(clk)
	ctx := context.Background()
	if err := l.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer l.Stop()
	b := batcher.New(100).WithClock(clk)
	b.WithRateLimiter(l)
	b.AddListener(l.Listener())
	rec := batchertest.NewRecorder()
	b.AddListener(rec.Listener())
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	wait := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	pauses := 0
	pause := func(want uint32) {
		t.Helper()
		b.Pause()
		pauses++
		wait("the pause event", func() bool { return rec.Count(batcher.PauseEvent) == pauses })
		wait(fmt.Sprintf("the capacity %d after Pause %d", want, pauses), func() bool { return l.Capacity() == want })
	}
	pause(9000)
	clk.Advance(500 * time.Millisecond)
	pause(9000) // within the cooldown: the same episode
	clk.Advance(time.Second)
	// A new episode at 1.5 s: after the cooldown (to 1 s) the fraction
	// regained 2 steps of 0.25 %, 9,050, then × 0.9.
	pause(8145)
}
