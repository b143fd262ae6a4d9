package limit_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
)

func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{"token_bucket capacity=10 rate=0.1/s", "gcra rate=100/s burst=20 name=per-ip",
		"fixed_window max=100 window=1m", "rolling_window limit=5,window=10s", "sliding_window max=3 window=1h30m",
		"gcra rate=1/0s burst=1", "token_bucket capacity=9223372036854775807 rate=1/s", "x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := limit.ParsePolicy(s)
		if err != nil {
			if !errors.Is(err, limit.ErrInvalidPolicy) {
				t.Fatalf("ParsePolicy(%q): untyped error %v", s, err)
			}
			return
		}
		back, err := limit.ParsePolicy(p.String())
		if err != nil || back != p {
			t.Fatalf("round trip of %q: %q gives %+v, %v; want %+v", s, p.String(), back, err, p)
		}
	})
}

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"100/s", "0.1/s", "5/min", "20/1m30s", "0.000000001/d", "1e3/s", "-1/s", "1/-1s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := limit.ParseRate(s)
		if err != nil {
			if !errors.Is(err, limit.ErrInvalidPolicy) {
				t.Fatalf("ParseRate(%q): untyped error %v", s, err)
			}
			return
		}
		if r.Count <= 0 || r.Period <= 0 {
			t.Fatalf("ParseRate(%q) = %+v", s, r)
		}
	})
}

func FuzzRateFromFloat(f *testing.F) {
	for _, x := range []float64{0.1, 1.0 / 3, 2.5, 1e12, 1e-7, 1000} {
		f.Add(x)
	}
	f.Fuzz(func(t *testing.T, x float64) {
		r, err := limit.RateFromFloat(x)
		if err != nil {
			return
		}
		got := float64(r.Count) / r.Period.Seconds()
		if d := got/x - 1; d > 1e-6 || d < -1e-6 {
			t.Fatalf("RateFromFloat(%v) = %+v = %v per second", x, r, got)
		}
	})
}

// FuzzDecide drives a memory store with arbitrary policies, costs and time
// steps (forwards and back) and checks what holds for every algorithm:
// no panic, typed errors, Remaining within [0, Limit], RetryAfter only on
// ReasonLimited, a cost above the limit always denied, cost 0 always allowed.
func FuzzDecide(f *testing.F) {
	f.Add(uint8(0), int64(10), int64(3), int64(1_000_000), []byte{1, 2, 3, 200, 7})
	f.Add(uint8(3), int64(5), int64(1), int64(7_000_000), []byte{9, 0, 255, 128})
	f.Fuzz(func(t *testing.T, alg uint8, lim, count, periodUS int64, steps []byte) {
		a := limit.Algorithms[int(alg)%len(limit.Algorithms)]
		d := time.Duration(periodUS) * time.Microsecond
		p := limit.Policy{Algorithm: a, Limit: lim, Rate: limit.Rate{Count: count, Period: d}, Window: d}
		clock := limittest.NewClock(limittest.Epoch)
		m, _ := limit.NewMemory(limit.MemoryOptions{Clock: clock, MaxKeys: 4})
		ctx := context.Background()
		for i, b := range steps {
			clock.Advance(time.Duration(int8(b)) * 37 * time.Millisecond)
			cost := int64(b % 16)
			if i%7 == 6 {
				cost = -cost
			}
			var dec limit.Decision
			var err error
			if i%5 == 4 {
				dec, err = m.Settle(ctx, "k", p, cost)
			} else {
				dec, err = m.AllowN(ctx, "k", p, cost)
			}
			if err != nil {
				if !errors.Is(err, limit.ErrInvalidPolicy) && !errors.Is(err, limit.ErrInvalidCost) {
					t.Fatalf("untyped error %v", err)
				}
				continue
			}
			if dec.Remaining < 0 || dec.Remaining > p.Limit || dec.ResetAfter < 0 {
				t.Fatalf("step %d: %+v", i, dec)
			}
			if (dec.RetryAfter > 0) != (dec.Reason == limit.ReasonLimited) {
				t.Fatalf("step %d: RetryAfter %v with reason %q", i, dec.RetryAfter, dec.Reason)
			}
			if i%5 != 4 && cost > p.Limit && dec.Allowed || i%5 != 4 && cost == 0 && !dec.Allowed {
				t.Fatalf("step %d: cost %d of limit %d: %+v", i, cost, p.Limit, dec)
			}
		}
	})
}

// FuzzCostFromFloat checks that a fractional cost is never charged less
// than it is worth, nor a whole unit more, and that a positive cost is
// never free.
func FuzzCostFromFloat(f *testing.F) {
	for _, v := range []float64{0, 1e-9, 4.9e-7, 5e-7, 0.1, 0.0015, 1, 2.5, 1e12, -1, math.NaN(), math.Inf(1)} {
		f.Add(v, int64(1000))
	}
	f.Fuzz(func(t *testing.T, tokens float64, scale int64) {
		n, err := limit.CostFromFloat(tokens, scale)
		units := tokens * float64(scale)
		switch {
		case scale <= 0:
			if !errors.Is(err, limit.ErrInvalidPolicy) {
				t.Fatalf("scale %d: %d, %v", scale, n, err)
			}
		case math.IsNaN(units) || tokens < 0 || units > 1<<50:
			if !errors.Is(err, limit.ErrInvalidCost) || !strings.HasPrefix(err.Error(), "limit: invalid cost ") {
				t.Fatalf("CostFromFloat(%v, %d) = %d, %v; want a *CostError", tokens, scale, n, err)
			}
		case err != nil:
			t.Fatalf("CostFromFloat(%v, %d): %v", tokens, scale, err)
		case tokens > 0 && n < 1, tokens == 0 && n != 0:
			t.Fatalf("CostFromFloat(%v, %d) = %d", tokens, scale, n)
		case float64(n) < units*(1-1e-9)-1e-6 || float64(n) >= units+1+units*1e-9:
			t.Fatalf("CostFromFloat(%v, %d) = %d for %v units", tokens, scale, n, units)
		}
	})
}
