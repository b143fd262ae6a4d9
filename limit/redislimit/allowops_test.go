package redislimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/limit/redislimit"
)

// takeOn makes key hot at s under p and spends one unit, so that s holds
// an allowance on it; it returns what s holds.
func takeOn(t *testing.T, s *redislimit.Store, key string, p limit.Policy) int64 {
	t.Helper()
	makeHot(t, s, key, p)
	dec, err := s.AllowN(context.Background(), key, p, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !dec.Allowed || s.HeldUnitsForTest() == 0 {
		t.Fatalf("no allowance taken on %s: %+v", p.Name, dec)
	}
	return s.HeldUnitsForTest()
}

// TestAllowanceAllowAllStaysAtomic: AllowAll on a key this store holds an
// allowance on gives the allowance back and decides every request together
// on the shared state, where another store's lent units count: a request
// that fails spends nothing on the others, and nothing is lost.
func TestAllowanceAllowAllStaysAtomic(t *testing.T) {
	ctx := context.Background()
	for _, p1 := range []limit.Policy{
		limit.TokenBucket(10, limit.PerHour(1)).Named("p1"),
		limit.GCRA(limit.PerHour(1), 10).Named("p1"),
		limit.FixedWindow(10, time.Hour).Named("p1"),
		limit.SlidingWindow(10, time.Hour).Named("p1"),
	} {
		t.Run(algCode(p1), func(t *testing.T) {
			p2 := limit.FixedWindow(3, time.Hour).Named("p2")
			stores := allowanceStores(t, limittest.NewClock(time.Unix(1_699_999_200, 0)), 3)
			a, b, one := stores[0], stores[1], stores[2]
			heldB := takeOn(t, b, "k", p1) // b: 1 spent, heldB lent
			takeOn(t, a, "k", p1)          // a: 1 spent, the rest lent
			all := func(c1, c2 int64) bool {
				t.Helper()
				out, err := a.AllowAll(ctx, []limit.Request{{Key: "k", Policy: p1, Cost: c1}, {Key: "k", Policy: p2, Cost: c2}}, nil)
				if err != nil {
					t.Fatal(err)
				}
				return out[0].Allowed && out[1].Allowed
			}
			if !all(1, 3) {
				t.Fatal("AllowAll of 1 and 3 denied")
			}
			if a.HeldUnitsForTest() != 0 {
				t.Fatalf("a holds %d after AllowAll on its key, want its allowance given back", a.HeldUnitsForTest())
			}
			if all(1, 1) {
				t.Fatal("AllowAll allowed with p2 spent")
			}
			// p1 has 10 - 2 spent - 1 - heldB lent left: one more than that
			// is refused because b's units count.
			if left := 10 - 3 - heldB; all(left+1, 0) || !all(left, 0) {
				t.Fatalf("AllowAll on p1: want exactly %d left with b's %d lent", left, heldB)
			}
			for _, s := range stores {
				if err := s.Close(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// b gives its units back: they, and nothing the refused
			// AllowAll calls touched, are all that is left.
			if rest := drain(t, one, "k", p1); rest != heldB {
				t.Fatalf("after Close: %d left on p1, want b's %d given back", rest, heldB)
			}
			if rest := drain(t, one, "k", p2); rest != 0 {
				t.Fatalf("after Close: %d left on p2, want 0", rest)
			}
		})
	}
}

// TestAllowanceSettleKeepsItsMeaning: Settle on a key this store holds an
// allowance on gives it back first and then charges or refunds the shared
// state; a refund never frees the units another store holds.
func TestAllowanceSettleKeepsItsMeaning(t *testing.T) {
	ctx := context.Background()
	for _, p := range []limit.Policy{
		limit.TokenBucket(20, limit.PerHour(1)).Named("p"),
		limit.GCRA(limit.PerHour(1), 20).Named("p"),
		limit.FixedWindow(20, time.Hour).Named("p"),
		limit.SlidingWindow(20, time.Hour).Named("p"),
	} {
		t.Run(algCode(p), func(t *testing.T) {
			stores := allowanceStores(t, limittest.NewClock(time.Unix(1_699_999_200, 0)), 3)
			a, b, one := stores[0], stores[1], stores[2]
			heldB := takeOn(t, b, "k", p)
			takeOn(t, a, "k", p)
			dec, err := a.Settle(ctx, "k", p, 4) // a charge after the fact
			if err != nil {
				t.Fatal(err)
			}
			if a.HeldUnitsForTest() != 0 {
				t.Fatalf("a holds %d after Settle on its key, want its allowance given back", a.HeldUnitsForTest())
			}
			if want := 20 - 2 - 4 - heldB; dec.Remaining != want {
				t.Fatalf("after a charge of 4: %d remaining, want %d (b's %d lent count)", dec.Remaining, want, heldB)
			}
			dec, err = a.Settle(ctx, "k", p, -100) // a refund of more than was spent
			if err != nil {
				t.Fatal(err)
			}
			// b's lease holds what it has left and the unit it spent and has
			// not reported yet: a refund frees neither.
			if want := 20 - heldB - 1; dec.Remaining != want {
				t.Fatalf("after a refund of 100: %d remaining, want %d: b's lease of %d stays counted", dec.Remaining, want, heldB+1)
			}
			if err := b.Close(ctx); err != nil {
				t.Fatal(err)
			}
			// b gives back what it has left and reports its spent unit.
			if rest := drain(t, one, "k", p); rest != 19 {
				t.Fatalf("after b's Close: %d left, want 19", rest)
			}
		})
	}
}

// algCode names p's algorithm in a subtest's name.
func algCode(p limit.Policy) string {
	return map[limit.Algorithm]string{limit.TokenBucketAlgorithm: "tb", limit.GCRAAlgorithm: "gcra",
		limit.FixedWindowAlgorithm: "fw", limit.SlidingWindowAlgorithm: "sw"}[p.Algorithm]
}

// TestAllowanceCountAllOnWindows: CountAll counts denied costs on the
// fixed and sliding windows, so on a key this store holds an allowance on
// it gives the allowance back and counts on the shared state, where
// another store's lent units count.
func TestAllowanceCountAllOnWindows(t *testing.T) {
	ctx := context.Background()
	for _, p := range []limit.Policy{
		limit.FixedWindow(10, time.Hour).Named("p"),
		limit.SlidingWindow(10, time.Hour).Named("p"),
	} {
		t.Run(algCode(p), func(t *testing.T) {
			stores := allowanceStores(t, limittest.NewClock(time.Unix(1_699_999_200, 0)), 3)
			a, b, one := stores[0], stores[1], stores[2]
			heldB := takeOn(t, b, "k", p)
			takeOn(t, a, "k", p)
			allowed := int64(0)
			for range 20 {
				out, err := a.CountAll(ctx, []limit.Request{{Key: "k", Policy: p, Cost: 1}}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if a.HeldUnitsForTest() != 0 {
					t.Fatal("a still holds units after CountAll on its key")
				}
				if out[0].Allowed {
					allowed++
				}
			}
			if want := 10 - 2 - heldB; allowed != want {
				t.Fatalf("CountAll allowed %d, want %d: 10 less the 2 spent and b's %d lent", allowed, want, heldB)
			}
			if err := b.Close(ctx); err != nil {
				t.Fatal(err)
			}
			// The denied costs were counted: nothing is left in the window
			// even with b's units back.
			if rest := drain(t, one, "k", p); rest != 0 {
				t.Fatalf("%d left after CountAll's denials, want 0", rest)
			}
		})
	}
}
