package limit_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
)

// TestEvery checks that Every(d) is the rate of one per d: a policy built
// with it decides exactly as the same rate given as a count per period,
// and a d that is not positive makes an invalid policy.
func TestEvery(t *testing.T) {
	if got := limit.Every(250 * time.Millisecond); got != (limit.Rate{Count: 1, Period: 250 * time.Millisecond}) {
		t.Fatalf("Every(250ms) = %+v", got)
	}
	for _, d := range []time.Duration{0, -time.Second} {
		if err := limit.GCRA(limit.Every(d), 1).Validate(); !errors.Is(err, limit.ErrInvalidPolicy) {
			t.Errorf("Every(%v): %v, want an invalid policy", d, err)
		}
	}
	clock := limittest.NewClock(limittest.Epoch)
	m := newMemory(t, limit.MemoryOptions{Clock: clock})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	for _, pair := range [][2]limit.Policy{
		{limit.GCRA(limit.Every(250*time.Millisecond), 3).Named("every"), limit.GCRA(limit.PerSecond(4), 3).Named("per")},
		{limit.TokenBucket(5, limit.Every(time.Minute/6)).Named("every"), limit.TokenBucket(5, limit.PerMinute(6)).Named("per")},
	} {
		for step := 0; step < 2000; step++ {
			clock.Advance(time.Duration(rng.IntN(200)) * time.Millisecond)
			cost := rng.Int64N(3)
			a, errA := m.AllowN(ctx, "k", pair[0], cost)
			b, errB := m.AllowN(ctx, "k", pair[1], cost)
			a.Policy, b.Policy = "", ""
			if errA != nil || errB != nil || a != b {
				t.Fatalf("%s, step %d, cost %d: Every gives %+v, %v; the count per period %+v, %v",
					pair[0].Algorithm, step, cost, a, errA, b, errB)
			}
		}
	}
}

// TestMemoryCountAll checks CountAll against its definition: every request
// decided on its own, none held back by another's denial; the windows
// count denied costs, the token bucket spends only allowed ones.
func TestMemoryCountAll(t *testing.T) {
	clock := limittest.NewClock(limittest.Epoch)
	m := newMemory(t, limit.MemoryOptions{Clock: clock})
	ctx := context.Background()
	fixed := limit.FixedWindow(2, time.Minute).Named("fixed")
	bucket := limit.TokenBucket(3, limit.PerMinute(1)).Named("bucket")
	reqs := []limit.Request{{Key: "a", Policy: fixed, Cost: 1}, {Key: "a", Policy: bucket, Cost: 1}}
	var out []limit.Decision
	var err error
	for i := 0; i < 4; i++ {
		if out, err = m.CountAll(ctx, reqs, out[:0]); err != nil || len(out) != 2 {
			t.Fatalf("count %d: %+v, %v", i, out, err)
		}
		if wantFixed := i < 2; out[0].Allowed != wantFixed {
			t.Errorf("count %d: fixed window %+v, allowed want %v", i, out[0], wantFixed)
		}
		if wantBucket := i < 3; out[1].Allowed != wantBucket || out[1].Reason == limit.ReasonOtherLimit {
			t.Errorf("count %d: token bucket %+v, allowed want %v, never held back by the window", i, out[1], wantBucket)
		}
	}
	// The window counted all four, so the key stays denied past what the
	// limit allows; the bucket spent only its three.
	if out, err = m.CountAll(ctx, []limit.Request{{Key: "a", Policy: fixed, Cost: 0}}, out[:0]); err != nil || out[0].Remaining != 0 {
		t.Fatalf("fixed window after four counts: %+v, %v", out, err)
	}
	clock.Advance(time.Minute)
	d, err := m.AllowN(ctx, "a", bucket, 0)
	if err != nil || d.Remaining != 1 {
		t.Fatalf("token bucket a minute after spending 3: %+v, %v; want 1 remaining", d, err)
	}
	if _, err := m.CountAll(ctx, []limit.Request{{Key: "a", Policy: fixed, Cost: -1}}, nil); !errors.Is(err, limit.ErrInvalidCost) {
		t.Fatalf("negative cost: %v", err)
	}
}

// ParsePolicy's errors name the limit as the text wrote it (capacity,
// burst, max or limit), or by the algorithm's word when it is missing.
func TestParsePolicyNamesLimitAsWritten(t *testing.T) {
	for _, c := range []struct{ text, field string }{
		{"gcra rate=100/s burst=0", "burst"},
		{"gcra rate=100/s limit=0", "limit"},
		{"token_bucket capacity=-1 rate=1/s", "capacity"},
		{"fixed_window max=0 window=1m", "max"},
		{"sliding_window window=1m", "max"},
		{"gcra rate=0/s burst=5", "rate"},
	} {
		_, err := limit.ParsePolicy(c.text)
		var pe *limit.PolicyError
		if !errors.As(err, &pe) {
			t.Fatalf("ParsePolicy(%q): %v, want a *PolicyError", c.text, err)
		}
		if pe.Field != c.field {
			t.Errorf("ParsePolicy(%q): field %q (%v), want %q", c.text, pe.Field, err, c.field)
		}
	}
}
