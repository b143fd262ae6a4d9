package limittest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
)

// Factory returns n stores that share their states (for a memory store, the
// same store n times; for a networked store, n clients of one server), all
// deciding at clock's time. Each test calls it once, so states of one test
// never meet another's.
type Factory func(t *testing.T, clock limit.Clock, n int) []limit.Store

// Run runs the conformance suite against the stores of f.
func Run(t *testing.T, f Factory) {
	t.Run("Steps", func(t *testing.T) { testSteps(t, f, Tables(), false) })
	t.Run("StepsAllowAll", func(t *testing.T) { testSteps(t, f, Tables(), true) })
	t.Run("Bounds", func(t *testing.T) { testSteps(t, f, BoundTables(), false) })
	t.Run("BoundsAllowAll", func(t *testing.T) { testSteps(t, f, BoundTables(), true) })
	t.Run("RetryNeverEarly", func(t *testing.T) { testRetryNeverEarly(t, f) })
	t.Run("FreshKeyBurst", func(t *testing.T) { testFreshKeyBurst(t, f) })
	t.Run("AllowAll", func(t *testing.T) { testAllowAll(t, f) })
	t.Run("AllowAllSameKey", func(t *testing.T) { testAllowAllSameKey(t, f) })
	t.Run("CountAll", func(t *testing.T) { testCountAll(t, f) })
	t.Run("FractionalCost", func(t *testing.T) { testFractionalCost(t, f) })
	t.Run("Errors", func(t *testing.T) { testErrors(t, f) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, f) })
	t.Run("ConcurrentAllowAll", func(t *testing.T) { testConcurrentAllowAll(t, f) })
}

func one(t *testing.T, f Factory) (limit.Store, *Clock) {
	clock := NewClock(Epoch)
	return f(t, clock, 1)[0], clock
}

// check compares a decision with the one wanted, Limit and Policy aside.
func check(t *testing.T, where string, p limit.Policy, got, want limit.Decision) {
	t.Helper()
	want.Limit, want.Policy = p.Limit, p.Name
	got.Err = nil
	if got != want {
		t.Errorf("%s:\n got  %+v\n want %+v", where, got, want)
	}
}

// testSteps runs the step tables, deciding with AllowN or, with all, with
// AllowAll on a single request (stores may take other paths for it).
func testSteps(t *testing.T, f Factory, tables []Table, all bool) {
	ctx := context.Background()
	for _, tab := range tables {
		t.Run(tab.Name, func(t *testing.T) {
			store, clock := one(t, f)
			p := tab.Policy.Named("steps")
			for i, st := range tab.Steps {
				clock.Set(Epoch.Add(st.At))
				where := fmt.Sprintf("step %d (at %v, %s cost %d)", i, st.At, st.Op, st.Cost)
				var got limit.Decision
				var err error
				switch st.Op {
				case "":
					if !all {
						got, err = store.AllowN(ctx, "k", p, st.Cost)
						break
					}
					var out []limit.Decision
					out, err = store.AllowAll(ctx, []limit.Request{{Key: "k", Policy: p, Cost: st.Cost}}, nil)
					if err == nil && len(out) != 1 {
						t.Fatalf("%s: %d decisions for one request", where, len(out))
					}
					if err == nil {
						got = out[0]
					}
				case "settle":
					got, err = store.Settle(ctx, "k", p, st.Cost)
				case "reset":
					if err = store.Reset(ctx, "k", p); err == nil {
						got, err = store.AllowN(ctx, "k", p, 0)
					}
				}
				if err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				check(t, where, p, got, st.Want)
			}
		})
	}
}

// policies are one policy per algorithm, for the property tests.
func policies() []limit.Policy {
	return []limit.Policy{
		limit.TokenBucket(10, limit.Rate{Count: 7, Period: 3 * time.Second}).Named("tb"),
		limit.GCRA(limit.Rate{Count: 3, Period: time.Second}, 5).Named("gcra"),
		limit.FixedWindow(10, 7*time.Second).Named("fixed"),
		limit.RollingWindow(10, 7*time.Second).Named("rolling"),
		limit.SlidingWindow(10, 7*time.Second).Named("sliding"),
	}
}

// testRetryNeverEarly walks random costs and times: after every denial
// with ReasonLimited, the same cost is still denied 1 µs before RetryAfter
// and allowed at RetryAfter.
func testRetryNeverEarly(t *testing.T, f Factory) {
	ctx := context.Background()
	for _, p := range policies() {
		t.Run(p.Name, func(t *testing.T) {
			store, clock := one(t, f)
			rng := rand.New(rand.NewPCG(1, uint64(len(p.Name))))
			denials := 0
			for i := 0; i < 150; i++ {
				clock.Advance(time.Duration(rng.IntN(900_000)) * time.Microsecond)
				cost := 1 + rng.Int64N(p.Limit)
				d, err := store.AllowN(ctx, "k", p, cost)
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
				clock.Advance(d.RetryAfter - time.Microsecond)
				if early, _ := store.AllowN(ctx, "k", p, cost); early.Allowed {
					t.Fatalf("step %d: cost %d allowed 1µs before RetryAfter %v", i, cost, d.RetryAfter)
				}
				clock.Advance(time.Microsecond)
				if on, _ := store.AllowN(ctx, "k", p, cost); !on.Allowed {
					t.Fatalf("step %d: cost %d denied at RetryAfter %v: %+v", i, cost, d.RetryAfter, on)
				}
			}
			if denials < 10 {
				t.Fatalf("only %d denials: the walk does not test much", denials)
			}
		})
	}
}

// testFreshKeyBurst checks that a fresh key admits exactly its limit at
// once, one by one, and that a cost above the limit is denied without a
// RetryAfter.
func testFreshKeyBurst(t *testing.T, f Factory) {
	ctx := context.Background()
	store, _ := one(t, f)
	for _, p := range policies() {
		d, err := store.AllowN(ctx, "big", p, p.Limit+1)
		if err != nil || d.Allowed || d.Reason != limit.ReasonExceedsLimit || d.RetryAfter != 0 || d.Remaining != p.Limit {
			t.Errorf("%s: cost above the limit: %+v, %v", p.Name, d, err)
		}
		n := int64(0)
		for {
			d, err := store.AllowN(ctx, "fresh", p, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				break
			}
			n++
		}
		if n != p.Limit {
			t.Errorf("%s: a fresh key admitted %d at once, want %d", p.Name, n, p.Limit)
		}
	}
}

func testAllowAll(t *testing.T, f Factory) {
	ctx := context.Background()
	store, _ := one(t, f)
	user := limit.TokenBucket(2, limit.PerMinute(1)).Named("user")
	tenant := limit.FixedWindow(3, time.Hour).Named("tenant")
	global := limit.GCRA(limit.PerMinute(1), 100).Named("global")
	reqs := []limit.Request{
		{Key: "{t1}:alice", Policy: user, Cost: 1},
		{Key: "{t1}", Policy: tenant, Cost: 1},
		{Key: "{t1}:all", Policy: global, Cost: 1},
	}
	var out []limit.Decision
	for i := 0; i < 2; i++ {
		var err error
		out, err = store.AllowAll(ctx, reqs, out[:0])
		if err != nil || len(out) != 3 || !limit.Combine(out).Allowed {
			t.Fatalf("call %d: %+v, %v", i, out, err)
		}
	}
	if out[0].Remaining != 0 || out[1].Remaining != 1 || out[2].Remaining != 98 {
		t.Fatalf("remaining after two: %+v", out)
	}
	out, err := store.AllowAll(ctx, reqs, out[:0])
	if err != nil {
		t.Fatal(err)
	}
	c := limit.Combine(out)
	if c.Allowed || c.Reason != limit.ReasonLimited || c.Policy != "user" || c.RetryAfter != time.Minute {
		t.Fatalf("combined third decision: %+v", c)
	}
	if out[0].Reason != limit.ReasonLimited || out[1].Reason != limit.ReasonOtherLimit || out[2].Reason != limit.ReasonOtherLimit {
		t.Fatalf("reasons of the third decision: %+v", out)
	}
	if out[1].Remaining != 1 || out[2].Remaining != 98 {
		t.Fatalf("the denied decision spent on the other limits: %+v", out)
	}
	d, _ := store.AllowN(ctx, "{t1}", tenant, 0)
	g, _ := store.AllowN(ctx, "{t1}:all", global, 0)
	if d.Remaining != 1 || g.Remaining != 98 {
		t.Fatalf("after the denied decision: tenant %+v global %+v", d, g)
	}
}

func testAllowAllSameKey(t *testing.T, f Factory) {
	ctx := context.Background()
	store, _ := one(t, f)
	p := limit.SlidingWindow(3, time.Minute).Named("same")
	r := limit.RollingWindow(3, time.Minute).Named("same-log")
	for _, pol := range []limit.Policy{p, r} {
		reqs := []limit.Request{{Key: "k", Policy: pol, Cost: 2}, {Key: "k", Policy: pol, Cost: 2}}
		out, err := store.AllowAll(ctx, reqs, nil)
		if err != nil || limit.Combine(out).Allowed || out[0].Reason != limit.ReasonOtherLimit {
			t.Fatalf("%s: two costs of 2 on a limit of 3 in one decision: %+v %v", pol.Name, out, err)
		}
		reqs[1].Cost = 1
		out, err = store.AllowAll(ctx, reqs, nil)
		if err != nil || !limit.Combine(out).Allowed || out[1].Remaining != 0 {
			t.Fatalf("%s: costs 2 and 1 on a limit of 3: %+v %v", pol.Name, out, err)
		}
	}
}

func testCountAll(t *testing.T, f Factory) {
	ctx := context.Background()
	store, _ := one(t, f)
	a := limit.FixedWindow(2, time.Minute).Named("a")
	b := limit.FixedWindow(5, time.Minute).Named("b")
	reqs := []limit.Request{{Key: "{x}", Policy: a, Cost: 1}, {Key: "{x}", Policy: b, Cost: 1}}
	var out []limit.Decision
	for i := 0; i < 3; i++ {
		var err error
		if out, err = store.CountAll(ctx, reqs, out[:0]); err != nil {
			t.Fatal(err)
		}
	}
	if out[0].Allowed || out[0].Remaining != 0 || !out[1].Allowed || out[1].Remaining != 2 {
		t.Fatalf("third count: %+v", out)
	}
	d, _ := store.AllowN(ctx, "{x}", b, 0)
	if d.Remaining != 2 {
		t.Fatalf("b after three counts: %+v", d)
	}
}

// testFractionalCost spends costs far below one unit of a scaled policy,
// converted by limit.CostFromFloat: each is charged one unit, never
// nothing, and a key is out once its units are spent.
func testFractionalCost(t *testing.T, f Factory) {
	ctx := context.Background()
	store, _ := one(t, f)
	for _, p := range policies() {
		scaled, err := p.Scale(1000)
		if err != nil {
			t.Fatal(err)
		}
		cost, err := limit.CostFromFloat(1e-7, 1000)
		if err != nil || cost != 1 {
			t.Fatalf("CostFromFloat(1e-7, 1000) = %d, %v; want 1 unit", cost, err)
		}
		for i := int64(1); i <= 200; i++ {
			d, err := store.AllowN(ctx, "tiny", scaled, cost)
			if err != nil || !d.Allowed || d.Remaining != scaled.Limit-i {
				t.Fatalf("%s: cost %d of %d: %+v, %v; want %d remaining", p.Name, i, cost, d, err, scaled.Limit-i)
			}
		}
	}
}

func testErrors(t *testing.T, f Factory) {
	ctx := context.Background()
	store, _ := one(t, f)
	p := limit.TokenBucket(1, limit.PerSecond(1))
	if _, err := store.AllowN(ctx, "k", p, -1); !errors.Is(err, limit.ErrInvalidCost) {
		t.Errorf("negative cost: %v", err)
	}
	if _, err := store.AllowN(ctx, "k", limit.Policy{Algorithm: "leaky"}, 1); !errors.Is(err, limit.ErrInvalidPolicy) {
		t.Errorf("unknown algorithm: %v", err)
	}
	if _, err := store.AllowAll(ctx, []limit.Request{{Key: "k", Policy: p, Cost: 1}, {Key: "k", Policy: limit.Policy{}}}, nil); !errors.Is(err, limit.ErrInvalidPolicy) {
		t.Errorf("AllowAll with an invalid policy: %v", err)
	}
}

// testConcurrent has 64 goroutines, spread over 4 stores sharing states,
// spend on one key per algorithm while the clock stands still, round after
// round; between rounds the clock moves on. Every round must admit exactly
// what the algorithm allows in it: never more (no over-admission), never
// less (no under-admission).
func testConcurrent(t *testing.T, f Factory) {
	const goroutines, rounds = 64, 4
	cases := []struct {
		p       limit.Policy
		step    time.Duration
		first   int64 // admitted in the first round
		perStep int64 // admitted in every later round
	}{
		{limit.TokenBucket(100, limit.PerSecond(100)).Named("tb"), 250 * time.Millisecond, 100, 25},
		{limit.GCRA(limit.PerSecond(100), 50).Named("gcra"), 300 * time.Millisecond, 50, 30},
		{limit.FixedWindow(100, time.Second).Named("fixed"), time.Second, 100, 100},
		{limit.RollingWindow(100, time.Second).Named("rolling"), time.Second, 100, 100},
		{limit.SlidingWindow(100, time.Second).Named("sliding"), 2 * time.Second, 100, 100},
	}
	clock := NewClock(Epoch)
	stores := f(t, clock, 4)
	for _, c := range cases {
		t.Run(c.p.Name, func(t *testing.T) {
			attempts := int(3*c.first)/goroutines + 1
			for r := 0; r < rounds; r++ {
				var admitted atomic.Int64
				var mu sync.Mutex
				seen := map[int64]int{} // Remaining of the allowed decisions
				var wg sync.WaitGroup
				errs := make(chan error, goroutines)
				for g := 0; g < goroutines; g++ {
					wg.Add(1)
					go func(s limit.Store) {
						defer wg.Done()
						for i := 0; i < attempts; i++ {
							d, err := s.AllowN(context.Background(), "hot", c.p, 1)
							if err != nil {
								errs <- err
								return
							}
							if d.Allowed {
								admitted.Add(1)
								mu.Lock()
								seen[d.Remaining]++
								mu.Unlock()
							}
						}
					}(stores[g%len(stores)])
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatal(err)
				}
				want := c.perStep
				if r == 0 {
					want = c.first
				}
				if got := admitted.Load(); got != want {
					t.Fatalf("round %d: %d goroutines admitted %d, want exactly %d; remaining seen: %v",
						r, goroutines, got, want, seen)
				}
				clock.Advance(c.step)
			}
		})
	}
}

// testConcurrentAllowAll has 64 goroutines decide a user's limit and their
// tenant's together, four users of 30 under one tenant of 100: exactly 100
// are admitted, every admitted request spent on both limits and no denied
// one on either.
func testConcurrentAllowAll(t *testing.T, f Factory) {
	clock := NewClock(Epoch)
	stores := f(t, clock, 4)
	user := limit.FixedWindow(30, time.Minute).Named("user")
	tenant := limit.GCRA(limit.PerHour(1), 100).Named("tenant")
	users := []string{"{t}:u0", "{t}:u1", "{t}:u2", "{t}:u3"}
	var perUser [4]atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			s := stores[g%len(stores)]
			reqs := []limit.Request{{Key: users[g%4], Policy: user, Cost: 1}, {Key: "{t}", Policy: tenant, Cost: 1}}
			var out []limit.Decision
			for i := 0; i < 4; i++ {
				var err error
				if out, err = s.AllowAll(context.Background(), reqs, out[:0]); err != nil {
					errs <- err
					return
				}
				if limit.Combine(out).Allowed {
					perUser[g%4].Add(1)
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := int64(0)
	for i := range perUser {
		n := perUser[i].Load()
		total += n
		d, err := stores[0].AllowN(context.Background(), users[i], user, 0)
		if err != nil || n > 30 || d.Remaining != 30-n {
			t.Fatalf("user %d: %d admitted, remaining %+v, %v", i, n, d, err)
		}
	}
	d, err := stores[0].AllowN(context.Background(), "{t}", tenant, 0)
	if err != nil || total != 100 || d.Remaining != 0 {
		t.Fatalf("%d admitted in all, want exactly 100; tenant %+v, %v", total, d, err)
	}
}
