package httplimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/redislimit"
	"github.com/costwise/batcher/middleware/httplimit"
)

// promiseStores are the two stores the docs promise the same decisions on:
// the memory store and the Redis store, both deciding at clk's time.
func promiseStores(t *testing.T, clk limit.Clock) map[string]func(t *testing.T) limit.Store {
	return map[string]func(t *testing.T) limit.Store{
		"memory": func(t *testing.T) limit.Store { return memStore(t, clk) },
		"redis": func(t *testing.T) limit.Store {
			c := redistest.Shared(t)
			prefix := "httplimit-promise-" + uuid.NewString()[:8] + ":"
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				iter := c.Scan(ctx, 0, prefix+"*", 200).Iterator()
				for iter.Next(ctx) {
					c.Del(ctx, iter.Val())
				}
			})
			s, err := redislimit.New(c, redislimit.Options{Prefix: prefix, Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
}

// wantFields checks the draft fields and Retry-After of a response
// exactly: the policy field, the RateLimit field and Retry-After ("" for
// none).
func wantFields(t *testing.T, step string, res response, code int, policy, rateLimit, retryAfter string) {
	t.Helper()
	if res.code != code {
		t.Fatalf("%s: status %d, want %d (headers %v)", step, res.code, code, res.h)
	}
	if got := res.h.Get("RateLimit-Policy"); got != policy {
		t.Errorf("%s: RateLimit-Policy %q, want %q", step, got, policy)
	}
	if got := res.h.Get("RateLimit"); got != rateLimit {
		t.Errorf("%s: RateLimit %q, want %q", step, got, rateLimit)
	}
	if got, ok := res.h["Retry-After"]; retryAfter == "" && ok {
		t.Errorf("%s: Retry-After %q, want none", step, got)
	} else if got := res.h.Get("Retry-After"); got != retryAfter {
		t.Errorf("%s: Retry-After %q, want %q", step, got, retryAfter)
	}
	parseDraft(t, res) // the structured-field grammar, and t never past Retry-After
}

// TestQuickStartPoliciesHeadersExact runs the README quick start's two
// policies (per-ip GCRA 100/min burst 20 on the client address, per-key
// token bucket 1000 at 1000/min on X-API-Key) on both stores and checks
// every field the docs promise, exactly: q is the policy's limit, w the
// time to refill it (seconds rounded up), r the decision's Remaining, t its
// ResetAfter rounded up (the retry delay on a denial), Retry-After the
// retry delay rounded up to whole seconds, not more, and a waiting client
// is admitted. Both policies are decided together; the fields describe the
// one closest to its limit; a cost no wait can admit is a 429 without
// Retry-After.
func TestQuickStartPoliciesHeadersExact(t *testing.T) {
	clk := newFakeClock()
	for name, mk := range promiseStores(t, clk) {
		t.Run(name, func(t *testing.T) {
			store := mk(t)
			ts := serve(t, httplimit.Options{Store: store, Now: clk.Now,
				Cost: httplimit.CostHeader("X-Cost", 1),
				Policies: []httplimit.Policy{
					{Name: "per-ip", Limit: limit.GCRA(limit.PerMinute(100), 20)},
					{Name: "per-key", Limit: limit.TokenBucket(1000, limit.PerMinute(1000)), Key: httplimit.KeyHeader("X-API-Key")},
				}})
			const perIP = `"per-ip";q=20;w=12` // 20 at one per 600 ms: 12 s to refill
			// Without an API key only per-ip applies: 600 ms to rest.
			wantFields(t, "first request", get(t, ts), 200, perIP, `"per-ip";r=19;t=1`, "")
			// With a key both apply; per-ip is the closer to its limit.
			wantFields(t, "second request", get(t, ts, "X-API-Key", "k"), 200, perIP, `"per-ip";r=18;t=2`, "")
			wantFields(t, "cost 17", get(t, ts, "X-API-Key", "k", "X-Cost", "17"), 200, perIP, `"per-ip";r=1;t=12`, "")
			// Cost 2 with 1 left: 600 ms short, so Retry-After is 1 (not 2).
			res := get(t, ts, "X-API-Key", "k", "X-Cost", "2")
			wantFields(t, "cost 2 over the limit", res, 429, perIP, `"per-ip";r=1;t=1`, "1")
			if p := problem(t, res); p["type"] != httplimit.QuotaExceededType {
				t.Errorf("problem type %v", p["type"])
			} else if v, _ := p["violated-policies"].([]any); len(v) != 1 || v[0] != "per-ip" {
				t.Errorf("violated-policies %v, want [per-ip]", p["violated-policies"])
			}
			// All or nothing: the denied request spent nothing on per-key.
			d, err := store.AllowN(context.Background(), "k", limit.TokenBucket(1000, limit.PerMinute(1000)).Named("per-key"), 0)
			if err != nil || d.Remaining != 982 {
				t.Errorf("per-key after 18 admitted and 2 denied: %+v %v, want 982 remaining", d, err)
			}
			// The client waits Retry-After and is admitted; per-ip then
			// has 11.6 s of debt (t=12).
			clk.Advance(time.Second)
			wantFields(t, "after Retry-After", get(t, ts, "X-API-Key", "k", "X-Cost", "2"), 200, perIP, `"per-ip";r=0;t=12`, "")
			// A cost above the burst: refused, and no Retry-After since
			// waiting does not help.
			clk.Advance(time.Minute)
			res = get(t, ts, "X-API-Key", "k", "X-Cost", "21")
			if res.code != 429 || res.h.Get("Retry-After") != "" {
				t.Errorf("cost 21 over a burst of 20: %d, Retry-After %q; want 429 without it", res.code, res.h.Get("Retry-After"))
			}
			if p := problem(t, res); p["type"] != httplimit.QuotaExceededType {
				t.Errorf("cost over the limit: problem type %v", p["type"])
			}
		})
	}
}

// TestTokenBucketWindowAndResetRoundedUp checks the rounding of w, t and
// Retry-After on a token bucket whose numbers are not whole seconds: 10
// tokens at 3 per 7 s refill in 23.33 s (w=24), one token in 2.33 s.
func TestTokenBucketWindowAndResetRoundedUp(t *testing.T) {
	clk := newFakeClock()
	for name, mk := range promiseStores(t, clk) {
		t.Run(name, func(t *testing.T) {
			ts := serve(t, httplimit.Options{Store: mk(t), Now: clk.Now, Cost: httplimit.CostHeader("X-Cost", 1),
				Policies: []httplimit.Policy{{Name: "tb", Limit: limit.TokenBucket(10, limit.Rate{Count: 3, Period: 7 * time.Second})}}})
			const pol = `"tb";q=10;w=24`
			wantFields(t, "cost 1", get(t, ts), 200, pol, `"tb";r=9;t=3`, "")
			wantFields(t, "cost 9", get(t, ts, "X-Cost", "9"), 200, pol, `"tb";r=0;t=24`, "")
			wantFields(t, "cost 1, empty", get(t, ts), 429, pol, `"tb";r=0;t=3`, "3")
			clk.Advance(3 * time.Second)
			// 3 s refilled 9/7 tokens and one is spent: a debt of 68/7
			// tokens, 22.67 s (t=23), no whole token left.
			wantFields(t, "after Retry-After", get(t, ts), 200, pol, `"tb";r=0;t=23`, "")
			// 4 tokens with 2/7 of one there: 26/7 tokens short, 8.67 s,
			// so Retry-After 9.
			wantFields(t, "cost 4", get(t, ts, "X-Cost", "4"), 429, pol, `"tb";r=0;t=9`, "9")
			clk.Advance(9 * time.Second)
			if res := get(t, ts, "X-Cost", "4"); res.code != 200 {
				t.Fatalf("cost 4 after Retry-After 9: %d", res.code)
			}
		})
	}
}
