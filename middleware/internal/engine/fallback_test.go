package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/middleware/limitcore"
)

// provider hands out one recorder.
type provider struct{ rec limitcore.Recorder }

func (p provider) NewRecorder(limitcore.MetricsOptions, []string) (limitcore.Recorder, error) {
	return p.rec, nil
}

// downStore is a limit.Store whose every call fails as a store failure
// does (an error matching limit.ErrStoreFailed): a Redis that is gone.
type downStore struct{ limit.Store }

func (downStore) fail(op string) error {
	return &limit.StoreError{Op: op, Err: fmt.Errorf("connection refused")}
}

func (s downStore) AllowN(context.Context, string, limit.Policy, int64) (limit.Decision, error) {
	return limit.Decision{}, s.fail("allow")
}

func (s downStore) AllowAll(_ context.Context, _ []limit.Request, out []limit.Decision) ([]limit.Decision, error) {
	return out, s.fail("allow all")
}

// With the local fallback deciding, a request denied by one policy is
// denied whatever the place of that policy among the others: the policies
// that would have admitted it come back with limit.ReasonOtherLimit, which
// is still a decision of the fallback, not a failure to fail open on.
func TestFallbackDeniesWithEveryPolicyOrder(t *testing.T) {
	perIP := limit.FixedWindow(2, time.Hour)
	global := limit.FixedWindow(1000, time.Hour)
	tenant := limit.FixedWindow(500, time.Hour)
	for _, tc := range []struct {
		name   string
		limits []limit.Policy
	}{
		{"per-ip first", []limit.Policy{perIP, global}},
		{"per-ip last", []limit.Policy{global, perIP}},
		{"per-ip first of three", []limit.Policy{perIP, global, tenant}},
		{"per-ip second of three", []limit.Policy{global, perIP, tenant}},
		{"per-ip last of three", []limit.Policy{global, tenant, perIP}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			names, keys := make([]string, len(tc.limits)), make([]string, len(tc.limits))
			ipAt := 0
			for i, l := range tc.limits {
				names[i] = fmt.Sprintf("p%d", i)
				tc.limits[i].Name = names[i]
				keys[i] = "k" + names[i]
				if l == perIP {
					ipAt = i
				}
			}
			rec := &countingRecorder{}
			e, err := Build(Options{Names: names, Limits: tc.limits, Store: downStore{}, Mode: FailFallback,
				DefaultTimeout: time.Second, MetricsProvider: provider{rec}})
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range []Action{Allow, Allow, Deny, Deny} {
				var o Outcome
				e.Decide(context.Background(), keys, 1, &o)
				if o.Action != want || o.N != len(keys) || o.Err == nil {
					t.Fatalf("request %d: action %v with %d results (err %v), want %v with every result",
						i, o.Action, o.N, o.Err, want)
				}
				if want == Deny && (o.Results[ipAt].Allowed || o.RetryAfter <= 0) {
					t.Errorf("request %d: per-ip result %+v, retry %v; want it denying with a retry delay",
						i, o.Results[ipAt], o.RetryAfter)
				}
			}
			for p := range names {
				if got := rec.decisions[p][limitcore.ResultFailedOpen]; got != 0 {
					t.Errorf("policy %d counted %d failed_open; the fallback decided every request", p, got)
				}
				if got := rec.decisions[p][limitcore.ResultDenied]; got != 2 {
					t.Errorf("policy %d counted %d denied, want 2", p, got)
				}
			}
		})
	}
}
