package limit_test

import (
	"slices"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
)

// TestCombineExceedsLimitNeverRetries checks the promise of Decision's
// RetryAfter and ReasonExceedsLimit through Combine: when one policy can
// never admit the cost, the whole is ReasonExceedsLimit with RetryAfter 0,
// in either order, even though another policy alone would admit it after a
// wait. The decisions come from a real store.
func TestCombineExceedsLimitNeverRetries(t *testing.T) {
	m, err := limit.NewMemory(limit.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	small := limit.TokenBucket(5, limit.PerSecond(5)) // capacity 5
	small.Name = "small"
	big := limit.TokenBucket(100, limit.PerSecond(100))
	big.Name = "big"
	ctx := t.Context()
	if _, err := m.AllowN(ctx, "k", big, 95); err != nil { // 5 left in big
		t.Fatal(err)
	}
	reqs := []limit.Request{{Key: "k", Policy: small, Cost: 10}, {Key: "k", Policy: big, Cost: 10}}
	for _, order := range [][]limit.Request{reqs, {reqs[1], reqs[0]}} {
		ds, err := m.AllowAll(ctx, order, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(ds, func(d limit.Decision) bool { return d.RetryAfter > 0 }) {
			t.Fatalf("setup: no policy asked for a wait: %+v", ds)
		}
		got := limit.Combine(ds)
		if got.Allowed || got.Reason != limit.ReasonExceedsLimit || got.RetryAfter != 0 {
			t.Errorf("first %q: Combine = allowed %v, %v, RetryAfter %v; want denied, %v, 0",
				order[0].Policy.Name, got.Allowed, got.Reason, got.RetryAfter, limit.ReasonExceedsLimit)
		}
	}
	// Without a policy that never admits, the longest wait stands.
	ds := []limit.Decision{
		{Allowed: false, Reason: limit.ReasonLimited, RetryAfter: 2 * time.Second, Limit: 10},
		{Allowed: false, Reason: limit.ReasonLimited, RetryAfter: 5 * time.Second, Limit: 10},
	}
	if got := limit.Combine(ds); got.Reason != limit.ReasonLimited || got.RetryAfter != 5*time.Second {
		t.Errorf("two limited: Combine = %v, RetryAfter %v; want %v, 5s", got.Reason, got.RetryAfter, limit.ReasonLimited)
	}
}
