package limit

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// testClock is a settable clock for the tests of this package.
type testClock struct{ t time.Time }

func (c *testClock) Now() time.Time { return c.t }

// TestEncodeRoundTrip checks that every state decide and settle can produce
// comes back exactly from a slot, packed or not, whatever the base.
func TestEncodeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, p := range []Policy{
		GCRA(PerSecond(100), 100), GCRA(Rate{Count: 3, Period: time.Second}, 7),
		GCRA(Rate{Count: 1e9, Period: time.Second}, 1e6),
		TokenBucket(100, PerSecond(100)), TokenBucket(1e6, PerSecond(1)), TokenBucket(5, Rate{Count: 7, Period: time.Minute}),
	} {
		pr, err := p.params()
		if err != nil {
			t.Fatal(err)
		}
		tab := &table{pr: pr}
		tab.packing()
		for k := 0; k < 100_000; k++ {
			base := rng.Int64N(1<<52) - 1<<51
			tm := base + rng.Int64N(1<<(rng.IntN(62)+1)) - 1<<(rng.IntN(50)+1)
			var s state
			if pr.alg == algGCRA {
				s = state{a: tm, b: rng.Int64N(pr.n)}
			} else {
				s = state{a: rng.Int64N(2*pr.cap + 1), b: tm}
			}
			a, bc := tab.encode(base, s)
			if (a >= 0) != (bc == 0) {
				t.Fatalf("%s: %+v under %d: word %d, bc %d: a word that is not negative must be packed", p, s, base, a, bc)
			}
			if got := tab.decode(base, a, bc); got != s {
				t.Fatalf("%s: %+v under %d: encoded %d %d, decoded %+v", p, s, base, a, bc, got)
			}
		}
	}
}

// TestPackedAgainstDecide runs random decisions, settlements, resets and
// clock moves (forward far enough to rebase, and backward) on a memory
// store with few keys and one shard, and checks every decision against
// decide and settle run on a map of states.
func TestPackedAgainstDecide(t *testing.T) {
	ctx := context.Background()
	for _, p := range []Policy{
		TokenBucket(1e6, PerSecond(1)), // a range of about 4 s: rebases often
		TokenBucket(10, Rate{Count: 3, Period: time.Second}),
		GCRA(PerSecond(100), 20), GCRA(Rate{Count: 3, Period: time.Second}, 7),
	} {
		rng := rand.New(rand.NewPCG(5, 6))
		clock := &testClock{t: time.Unix(1_700_000_000, 0)}
		m, err := NewMemory(MemoryOptions{Shards: 1, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		pr, _ := p.params()
		ref := map[string]state{}
		for step := 0; step < 50_000; step++ {
			switch r := rng.IntN(100); {
			case r < 3:
				clock.t = clock.t.Add(time.Duration(rng.Int64N(int64(10 * time.Second))))
			case r < 4:
				clock.t = clock.t.Add(-time.Duration(rng.Int64N(int64(20 * time.Second))))
			case r < 40:
				clock.t = clock.t.Add(time.Duration(rng.Int64N(int64(time.Second / 10))))
			}
			now := clock.t.UnixMicro()
			key := "k" + strconv.Itoa(rng.IntN(40))
			var got, want Decision
			switch r := rng.IntN(100); {
			case r < 2:
				if err := m.Reset(ctx, key, p); err != nil {
					t.Fatal(err)
				}
				delete(ref, key)
				continue
			case r < 8:
				delta := rng.Int64N(2*p.Limit+1) - p.Limit
				got, err = m.Settle(ctx, key, p, delta)
				var ns state
				want, ns = pr.settle(ref[key], now, delta)
				want.Allowed = true
				ref[key] = ns
				if pr.atRest(ns, now) { // the store drops it
					delete(ref, key)
				}
			default:
				cost := rng.Int64N(4)
				got, err = m.AllowN(ctx, key, p, cost)
				var ns state
				want, ns = pr.decide(ref[key], now, cost, false)
				ref[key] = ns
			}
			if err != nil {
				t.Fatal(err)
			}
			want.Policy = p.Name
			if got != want {
				t.Fatalf("%s, step %d, key %s: got %+v, want %+v", p, step, key, got, want)
			}
		}
	}
}

// TestPerToken checks the whole tokens in u units against a division.
func TestPerToken(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for k := 0; k < 1_000_000; k++ {
		p := rng.Int64N(1<<(rng.IntN(50)+1)) + 1
		pr := params{p: p, invP: 1 / float64(p)}
		u := rng.Int64N(1<<(rng.IntN(52)+1)) - 1<<10
		if k%4 == 0 { // around multiples of p
			u = (u/p)*p + rng.Int64N(3) - 1
		}
		want := max(0, u/p)
		if got := pr.perToken(u); got != want {
			t.Fatalf("perToken(%d) with p %d = %d, want %d", u, p, got, want)
		}
	}
}
