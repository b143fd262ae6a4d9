package redislimit_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/limit/redislimit"
)

// TestStoresRefuseBadPolicies: a policy built in code, not parsed, is
// validated by every store on every call, as ParsePolicy validates text: a
// *limit.PolicyError naming the field, with nothing stored and, on Redis,
// no script call sent.
func TestStoresRefuseBadPolicies(t *testing.T) {
	ctx := context.Background()
	bad := []struct {
		p     limit.Policy
		field string
	}{
		{limit.Policy{Algorithm: "leaky_bucket", Limit: 5, Window: time.Second}, "algorithm"},
		{limit.GCRA(limit.PerSecond(1), 5).Named("a b"), "name"},
		{limit.GCRA(limit.PerSecond(1), 5).Named(strings.Repeat("n", 129)), "name"},
		{limit.TokenBucket(0, limit.PerSecond(1)), "limit"},
		{limit.GCRA(limit.PerSecond(1), -5), "limit"},
		{limit.RollingWindow(1<<20+1, time.Second), "limit"},
		{limit.SlidingWindow(1<<30+1, time.Second), "limit"},
		{limit.FixedWindow(1<<40, 1<<30*time.Microsecond), "limit"},
		{limit.GCRA(limit.Rate{Count: 1, Period: 0}, 5), "rate"},
		{limit.TokenBucket(5, limit.Rate{Count: 1, Period: 1500 * time.Nanosecond}), "rate"},
		{limit.TokenBucket(1<<40, limit.Rate{Count: 1, Period: 1 << 20 * time.Microsecond}), "rate"},
		{limit.FixedWindow(5, 0), "window"},
		{limit.SlidingWindow(5, -time.Minute), "window"},
		{limit.RollingWindow(5, 1500*time.Nanosecond), "window"},
	}
	stores := costStores(limittest.NewClock(limittest.Epoch))
	for _, name := range slices.Sorted(maps.Keys(stores)) {
		t.Run(name, func(t *testing.T) {
			s := stores[name](t)
			sent := func() int64 {
				if rs, ok := s.(*redislimit.Store); ok {
					return rs.AllowanceStats().Commands
				}
				return 0
			}
			before := sent()
			for _, b := range bad {
				calls := map[string]func() error{
					"AllowN": func() error { _, err := s.AllowN(ctx, "k", b.p, 1); return err },
					"AllowAll": func() error {
						_, err := s.AllowAll(ctx, []limit.Request{{Key: "ok", Policy: limit.GCRA(limit.PerSecond(1), 5), Cost: 1}, {Key: "k", Policy: b.p, Cost: 1}}, nil)
						return err
					},
					"CountAll": func() error {
						_, err := s.CountAll(ctx, []limit.Request{{Key: "k", Policy: b.p, Cost: 1}}, nil)
						return err
					},
					"Settle": func() error { _, err := s.Settle(ctx, "k", b.p, 1); return err },
					"Reset":  func() error { return s.Reset(ctx, "k", b.p) },
				}
				for op, call := range calls {
					err := call()
					var pe *limit.PolicyError
					if !errors.As(err, &pe) || pe.Field != b.field {
						t.Errorf("%s under %+v: %v; want a *limit.PolicyError on %q", op, b.p, err, b.field)
					}
				}
			}
			if n := sent() - before; n != 0 {
				t.Errorf("%d script calls sent for invalid policies, want none", n)
			}
			if m, ok := s.(*limit.Memory); ok && m.Stats().Keys != 0 {
				t.Errorf("stats %+v after invalid policies, want no key stored", m.Stats())
			}
			if d, err := s.AllowN(ctx, "ok", limit.GCRA(limit.PerSecond(1), 5), 0); err != nil || d.Remaining != 5 {
				t.Errorf("a valid request beside an invalid policy: %+v %v, want nothing spent", d, err)
			}
		})
	}
}
