package redislimit_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/limit/redislimit"
)

// costStores are the stores the cost promises hold for: the memory store,
// and a single server with batches (the default) and without, all deciding
// at clock's time.
func costStores(clock *limittest.Clock) map[string]func(t *testing.T) limit.Store {
	return map[string]func(t *testing.T) limit.Store{
		"memory": func(t *testing.T) limit.Store {
			m, err := limit.NewMemory(limit.MemoryOptions{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			return m
		},
		"redis": func(t *testing.T) limit.Store { return costRedis(t, clock, 0) },
		"redis MaxBatch=1": func(t *testing.T) limit.Store {
			return costRedis(t, clock, 1)
		},
	}
}

func costRedis(t *testing.T, clock *limittest.Clock, maxBatch int) limit.Store {
	c := connect(t)
	s, err := redislimit.New(c, redislimit.Options{Prefix: testPrefix(t, c), Clock: clock, MaxBatch: maxBatch})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// eachCostCase runs f for every store and every algorithm.
func eachCostCase(t *testing.T, f func(t *testing.T, s limit.Store, p limit.Policy)) {
	clock := limittest.NewClock(limittest.Epoch)
	stores := costStores(clock)
	algs := limittest.EveryAlgorithm()
	for _, sn := range slices.Sorted(maps.Keys(stores)) {
		t.Run(sn, func(t *testing.T) {
			s := stores[sn](t)
			for _, an := range slices.Sorted(maps.Keys(algs)) {
				t.Run(an, func(t *testing.T) { f(t, s, algs[an].Named(an)) })
			}
		})
	}
}

// TestNegativeCostRefusedEverywhere: "integer costs ≥ 0". A negative cost is
// a *limit.CostError on every decision path, and spends or refunds nothing,
// not even for the valid requests beside it in AllowAll and CountAll.
func TestNegativeCostRefusedEverywhere(t *testing.T) {
	ctx := context.Background()
	eachCostCase(t, func(t *testing.T, s limit.Store, p limit.Policy) {
		if d, err := s.AllowN(ctx, "spent", p, 1); err != nil || !d.Allowed {
			t.Fatalf("spending 1: %+v %v", d, err)
		}
		before, err := s.AllowN(ctx, "spent", p, 0)
		if err != nil {
			t.Fatal(err)
		}
		reqs := []limit.Request{{Key: "other", Policy: p, Cost: 1}, {Key: "spent", Policy: p, Cost: -1}}
		calls := map[string]func() error{
			"AllowN": func() error { _, err := s.AllowN(ctx, "spent", p, -1); return err },
			"AllowN at the int64 bound": func() error {
				_, err := s.AllowN(ctx, "spent", p, -1<<63)
				return err
			},
			"AllowAll": func() error { _, err := s.AllowAll(ctx, reqs, nil); return err },
			"CountAll": func() error { _, err := s.CountAll(ctx, reqs, nil); return err },
		}
		for name, call := range calls {
			var ce *limit.CostError
			if err := call(); !errors.As(err, &ce) || !errors.Is(err, limit.ErrInvalidCost) {
				t.Errorf("%s with a negative cost: %v, want a *limit.CostError", name, err)
			}
		}
		if after, err := s.AllowN(ctx, "spent", p, 0); err != nil || after != before {
			t.Errorf("the spent key after negative costs:\n got  %+v %v\n want %+v", after, err, before)
		}
		if other, err := s.AllowN(ctx, "other", p, 0); err != nil || other.Remaining != p.Limit {
			t.Errorf("a valid request beside a negative cost: %+v %v, want nothing spent", other, err)
		}
	})
}

// TestCostZeroOnlyLooks: "0 only looks and is always allowed". On a key
// spent to its limit and one limit into debt (Settle), a cost of 0 is
// allowed, through AllowN, AllowAll and CountAll, and changes nothing: the
// next cost of 1 is denied exactly as before the looks.
func TestCostZeroOnlyLooks(t *testing.T) {
	ctx := context.Background()
	eachCostCase(t, func(t *testing.T, s limit.Store, p limit.Policy) {
		if d, err := s.AllowN(ctx, "k", p, p.Limit); err != nil || !d.Allowed {
			t.Fatalf("spending the limit: %+v %v", d, err)
		}
		if _, err := s.Settle(ctx, "k", p, p.Limit); err != nil {
			t.Fatal(err)
		}
		denied, err := s.AllowN(ctx, "k", p, 1)
		if err != nil || denied.Allowed {
			t.Fatalf("a cost of 1 in debt: %+v %v, want denied", denied, err)
		}
		look := []limit.Request{{Key: "k", Policy: p, Cost: 0}}
		for i := 0; i < 3; i++ {
			d, err := s.AllowN(ctx, "k", p, 0)
			if err != nil || !d.Allowed || d.Reason != limit.ReasonNone {
				t.Fatalf("AllowN cost 0, look %d: %+v %v, want allowed", i, d, err)
			}
			for name, multi := range map[string]func(context.Context, []limit.Request, []limit.Decision) ([]limit.Decision, error){
				"AllowAll": s.AllowAll, "CountAll": s.CountAll,
			} {
				out, err := multi(ctx, look, nil)
				if err != nil || len(out) != 1 || !out[0].Allowed {
					t.Fatalf("%s cost 0, look %d: %+v %v, want allowed", name, i, out, err)
				}
			}
		}
		if again, err := s.AllowN(ctx, "k", p, 1); err != nil || again != denied {
			t.Errorf("a cost of 1 after the looks:\n got  %+v %v\n want %+v", again, err, denied)
		}
	})
}
