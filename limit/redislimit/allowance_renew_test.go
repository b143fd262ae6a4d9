package redislimit_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/limit/redislimit"
	"go.uber.org/goleak"
)

// settle waits until s has no renewal in flight or due: the renewal
// goroutine runs on its own, the fake clock stands still meanwhile.
func settle(t *testing.T, s *redislimit.Store) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !s.SettledForTest(); {
		if time.Now().After(deadline) {
			t.Fatal("the renewal goroutine did not settle in 10s")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestAllowanceRenewsInBackground: a key decided steadily is renewed by the
// store's goroutine before its remainder or its lease runs out, so its
// decisions never wait for Redis once the allowance is sized.
func TestAllowanceRenewsInBackground(t *testing.T) {
	const lease = 200 * time.Millisecond
	clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
	c := connect(t)
	s, err := redislimit.New(c, redislimit.Options{Prefix: testPrefix(t, c), Clock: clock, LocalAllowance: true,
		AllowanceLease: lease})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	p := limit.TokenBucket(1000, limit.PerSecond(1000)).Named("tb")
	warm(t, clock, []*redislimit.Store{s}, "k", p, lease)
	var syncAfterWarm int64
	for phase := range 100 { // 1 s at 400 decisions/s, the lease 200 ms
		for range 4 {
			d, err := s.AllowN(context.Background(), "k", p, 1)
			if err != nil || !d.Allowed {
				t.Fatalf("phase %d: %+v %v", phase, d, err)
			}
		}
		clock.Advance(10 * time.Millisecond)
		settle(t, s)
		if phase == 20 {
			st := s.AllowanceStats()
			syncAfterWarm = st.Renewals - st.Background
		}
	}
	st := s.AllowanceStats()
	if st.Background == 0 {
		t.Fatalf("no background renewal: %+v", st)
	}
	if sync := st.Renewals - st.Background; sync != syncAfterWarm {
		t.Fatalf("%d decisions waited for Redis after the first 20 phases: %+v", sync-syncAfterWarm, st)
	}
	if st.Local < 390 || st.Expired != 0 {
		t.Fatalf("stats: %+v; want nearly all 400 decisions local, nothing expired", st)
	}
}

// TestAllowanceGoroutineEndsWhenCold: the renewal goroutine runs only while
// the store holds allowances: once its key cools, the allowance is given
// back and the goroutine ends, Close or not.
func TestAllowanceGoroutineEndsWhenCold(t *testing.T) {
	const lease = 100 * time.Millisecond
	clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
	c := connect(t)
	s, err := redislimit.New(c, redislimit.Options{Prefix: testPrefix(t, c), Clock: clock, LocalAllowance: true,
		AllowanceLease: lease})
	if err != nil {
		t.Fatal(err)
	}
	p := limit.GCRA(limit.PerSecond(100), 50).Named("g")
	warm(t, clock, []*redislimit.Store{s}, "k", p, lease)
	renewed := s.AllowanceStats().Background
	if d, err := s.AllowN(context.Background(), "k", p, 1); err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	if keys, units := s.HeldForTest(); keys != 1 || units == 0 {
		t.Fatalf("held %d keys, %d units: want the warmed key's allowance", keys, units)
	}
	// The decision came half a lease after the take: the renewal goroutine
	// renews the lease (from now) before the clock moves on.
	for deadline := time.Now().Add(10 * time.Second); s.AllowanceStats().Background == renewed; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the half-gone lease was not renewed in 10s: %+v", s.AllowanceStats())
		}
	}
	// No decision for more than a period: cold, with the lease still
	// running (a whole lease would end it first, and its units would count
	// as expired rather than returned: Redis no longer holds them).
	clock.Advance(lease * 3 / 4)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if keys, _ := s.HeldForTest(); keys == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cold key's allowance was not given back in 10s")
		}
	}
	// The goroutine gives back, then ends: no goroutine of the store is
	// left although it was not closed.
	goleak.VerifyNone(t, goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/maintnotifications.(*CircuitBreakerManager).cleanupLoop"))
	if st := s.AllowanceStats(); st.Returned == 0 || st.Expired != 0 {
		t.Fatalf("stats: %+v; want the remainder returned, nothing expired", st)
	}
	// Busy again: the key is lent again, and its decisions are local.
	warm(t, clock, []*redislimit.Store{s}, "k", p, lease)
	before := s.AllowanceStats()
	for range 5 {
		if d, err := s.AllowN(context.Background(), "k", p, 1); err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
	}
	if keys, _ := s.HeldForTest(); keys != 1 {
		t.Fatalf("held %d keys after the key warmed again, want 1", keys)
	}
	if st := s.AllowanceStats(); st.Local-before.Local < 4 {
		t.Fatalf("%d of 5 decisions local after the key warmed again: %+v", st.Local-before.Local, st)
	}
	_ = s.Close(context.Background())
}

// TestAllowanceHotRetryNeverEarly walks random costs on a key held in an
// allowance, the clock moving by up to twice the lease: every denial's
// RetryAfter is never early (the same cost is allowed at it), including
// when the remainder held could have met part of the cost and the lease
// ends before the retry.
func TestAllowanceHotRetryNeverEarly(t *testing.T) {
	const lease = 400 * time.Millisecond
	for _, p := range []limit.Policy{
		limit.TokenBucket(10, limit.Rate{Count: 7, Period: 3 * time.Second}).Named("tb"),
		limit.GCRA(limit.Rate{Count: 3, Period: time.Second}, 5).Named("gcra"),
	} {
		t.Run(p.Name, func(t *testing.T) {
			clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
			c := connect(t)
			s, err := redislimit.New(c, redislimit.Options{Prefix: testPrefix(t, c), Clock: clock,
				LocalAllowance: true, AllowanceLease: lease})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			rng := rand.New(rand.NewPCG(3, uint64(len(p.Name))))
			ctx := context.Background()
			// advance moves the clock by d keeping the key hot: cost-0
			// decisions, four every quarter of the lease, the renewal
			// goroutine keeping up (units it lets expire would be lost,
			// as in a store frozen for half a lease).
			advance := func(d time.Duration) {
				for d > 0 {
					step := min(d, lease/4)
					clock.Advance(step)
					d -= step
					settle(t, s)
					for range redislimit.HotThreshold {
						if _, err := s.AllowN(ctx, "k", p, 0); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			denials := 0
			for i := 0; i < 200; i++ {
				advance(time.Duration(rng.IntN(int(lease/2/time.Microsecond))) * time.Microsecond)
				cost := 1 + rng.Int64N(p.Limit)
				if rng.IntN(3) > 0 {
					cost = 1
				}
				d, err := s.AllowN(ctx, "k", p, cost)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed || d.Reason != limit.ReasonLimited {
					continue
				}
				denials++
				if d.RetryAfter <= 0 {
					t.Fatalf("step %d: denied with RetryAfter %v", i, d.RetryAfter)
				}
				advance(d.RetryAfter)
				if on, err := s.AllowN(ctx, "k", p, cost); err != nil || !on.Allowed {
					t.Fatalf("step %d: cost %d denied at RetryAfter %v: %+v %v", i, cost, d.RetryAfter, on, err)
				}
			}
			if st := s.AllowanceStats(); denials < 10 || st.Local == 0 {
				t.Fatalf("%d denials, stats %+v: the walk does not test much", denials, st)
			}
		})
	}
}

// TestAllowanceKeepsOneTripRetry: a decision the one-trip path refused
// just before its key turned hot comes back at the time it was given and
// is allowed, although the new allowance's first take, made before that
// time, came back short (it took what was free; a refusal time for all it
// asked for would fall after the decision's).
func TestAllowanceKeepsOneTripRetry(t *testing.T) {
	const lease = 400 * time.Millisecond
	for _, tc := range []struct {
		p           limit.Policy
		first, cost int64
	}{
		{limit.TokenBucket(10, limit.Rate{Count: 7, Period: 3 * time.Second}).Named("tb"), 8, 3},
		{limit.GCRA(limit.Rate{Count: 3, Period: time.Second}, 5).Named("gcra"), 4, 3},
	} {
		t.Run(tc.p.Name, func(t *testing.T) {
			clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
			s := leasedStores(t, clock, 1, lease)[0]
			ctx := context.Background()
			allow := func(cost int64) limit.Decision {
				t.Helper()
				d, err := s.AllowN(ctx, "k", tc.p, cost)
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			// Busy periods, one short of hot: the last one is the current.
			for i := range redislimit.WarmPeriods {
				if i > 0 {
					clock.Advance(lease / 2)
				}
				for range redislimit.HotThreshold {
					allow(0)
				}
			}
			if d := allow(tc.first); !d.Allowed {
				t.Fatalf("first: %+v", d)
			}
			denied := allow(tc.cost)
			if denied.Allowed || denied.RetryAfter <= lease/2 {
				t.Fatalf("want a denial longer than a period: %+v", denied)
			}
			if st := s.AllowanceStats(); st.Local != 0 {
				t.Fatalf("decided locally before the key was hot: %+v", st)
			}
			// The next period: the key turns hot, and the allowance's first
			// take (in the background) finds less than it asks for.
			clock.Advance(lease / 2)
			allow(0)
			settle(t, s)
			if keys, units := s.HeldForTest(); keys != 1 || units == 0 || units >= tc.cost {
				t.Fatalf("held %d keys, %d units: want part of the cost", keys, units)
			}
			// The key stays hot (cost-0 decisions, the renewal goroutine
			// keeping up) until the retry time.
			for left := denied.RetryAfter - lease/2; left > 0; {
				step := min(left, lease/4)
				clock.Advance(step)
				left -= step
				settle(t, s)
				if left > 0 {
					for range redislimit.HotThreshold {
						allow(0)
					}
				}
			}
			if d := allow(tc.cost); !d.Allowed {
				t.Fatalf("cost %d denied at the RetryAfter %v the one-trip path gave: %+v", tc.cost, denied.RetryAfter, d)
			}
		})
	}
}

// TestAllowanceCountAll: CountAll decides a token bucket or GCRA request
// on a key held in an allowance from it, and sends the others to Redis
// together.
func TestAllowanceCountAll(t *testing.T) {
	const lease = 100 * time.Millisecond
	clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
	c := connect(t)
	s, err := redislimit.New(c, redislimit.Options{Prefix: testPrefix(t, c), Clock: clock, LocalAllowance: true,
		AllowanceLease: lease})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	hot := limit.TokenBucket(100, limit.PerHour(1)).Named("hot")
	cold := limit.FixedWindow(3, time.Hour).Named("cold")
	ctx := context.Background()
	for range redislimit.WarmPeriods + 1 {
		for range redislimit.HotThreshold {
			if _, err := s.CountAll(ctx, []limit.Request{{Key: "{t}", Policy: hot}}, nil); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(lease / 2)
	}
	reqs := []limit.Request{{Key: "{t}", Policy: hot, Cost: 1}, {Key: "{t}", Policy: cold, Cost: 1}}
	var out []limit.Decision
	for i := range 5 {
		before := s.AllowanceStats()
		if out, err = s.CountAll(ctx, reqs, out[:0]); err != nil {
			t.Fatal(err)
		}
		after := s.AllowanceStats()
		if len(out) != 2 || !out[0].Allowed || out[0].Policy != "hot" || out[1].Policy != "cold" ||
			out[1].Allowed != (i < 3) || out[1].Remaining != max(0, 2-int64(i)) {
			t.Fatalf("count %d: %+v", i, out)
		}
		if after.Local-before.Local != 1 || after.Remote-before.Remote != 1 {
			t.Fatalf("count %d: %d local, %d remote; want the hot request local", i,
				after.Local-before.Local, after.Remote-before.Remote)
		}
	}
	// The one-trip path sees what was spent: 5 of 100, and what is lent.
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := s.AllowN(ctx, "{t}", hot, 0)
	if err != nil || d.Remaining != 95 {
		t.Fatalf("after Close: %+v %v; want 95 remaining", d, err)
	}
}
