package redislimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
)

// TestAllowanceSaturatedKeyTakesShares: three stores ask for ten times a
// key's rate. Once a take comes back short, a store refuses locally until
// its share has refilled, and a turn per other holder more, instead of
// taking again as soon as a few units are back: about two calls per
// share (the take, and the call that finds it spent and reports it),
// nothing over the bucket, nearly all of it admitted, no store starved.
func TestAllowanceSaturatedKeyTakesShares(t *testing.T) {
	const (
		lease   = 500 * time.Millisecond
		seconds = 4
		perMs   = 10 // decisions per millisecond over the three stores
	)
	for _, p := range []limit.Policy{
		limit.TokenBucket(1000, limit.PerSecond(1000)).Named("tb"),
		limit.GCRA(limit.PerSecond(1000), 1000).Named("gcra"),
	} {
		t.Run(p.Name, func(t *testing.T) {
			clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
			stores := leasedStores(t, clock, 3, lease)
			warm(t, clock, stores, "hot", p, lease)
			ctx := context.Background()
			var admitted [3]int64
			var calls0 int64
			for ms := range seconds * 1000 {
				if ms == 1000 { // the first second spends the full bucket
					calls0 = 0
					for _, s := range stores {
						calls0 += s.AllowanceStats().Commands
					}
				}
				for i := range perMs {
					n := (ms*perMs + i) % len(stores)
					d, err := stores[n].AllowN(ctx, "hot", p, 1)
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						admitted[n]++
					} else if d.RetryAfter <= 0 {
						t.Fatalf("ms %d: refused with RetryAfter %v", ms, d.RetryAfter)
					}
				}
				clock.Advance(time.Millisecond)
				for _, s := range stores {
					settle(t, s)
				}
			}
			var calls, total, held int64
			for _, s := range stores {
				calls += s.AllowanceStats().Commands
				_, h := s.HeldForTest()
				held += h
			}
			calls -= calls0
			for _, n := range admitted {
				total += n
			}
			// The bucket, full after the warm-up (cost 0 spends nothing),
			// plus its refill from the first decision to the last.
			bound := p.Limit + (seconds*1000-1)*p.Rate.Count/1000
			t.Logf("admitted %v (%d of %d), %d held, %d script calls in %d s", admitted, total, bound, held, calls, seconds-1)
			if total > bound {
				t.Fatalf("admitted %d, over the %d the bucket allows", total, bound)
			}
			if total < bound*97/100 {
				t.Fatalf("admitted %d: less than 97%% of the %d the bucket allows", total, bound)
			}
			// A share is limit/(2·holders), about 166 units: six shares a
			// second, two calls each; taking whenever a few units are back
			// makes 30 or more.
			if perSecond := float64(calls) / (seconds - 1); perSecond > 15 {
				t.Fatalf("%.1f script calls a second on a saturated key, want at most 15", perSecond)
			}
			// Each store asks for a third: none admits less than a sixth.
			for i, n := range admitted {
				if n < total/6 {
					t.Fatalf("store %d admitted %d of %d: starved", i, n, total)
				}
			}
		})
	}
}
