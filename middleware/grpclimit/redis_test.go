package grpclimit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/redislimit"
	"github.com/costwise/batcher/middleware/grpclimit"
	"github.com/costwise/batcher/middleware/promlimit"
)

// With Redis stopped in the middle of the test, a fail-closed server
// refuses calls with UNAVAILABLE and a RetryInfo, and a fail-open one
// serves them; both count the outcome.
func TestRedisStoppedFailClosedAndOpen(t *testing.T) {
	for _, mode := range []grpclimit.FailMode{grpclimit.FailClosed, grpclimit.FailOpen} {
		srv := redistest.StartServer(t)
		store, err := redislimit.New(srv.Client(t), redislimit.Options{})
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		c := serveHealth(t, grpclimit.Options{
			Policies: []grpclimit.Policy{{Name: "per-peer", Limit: limit.FixedWindow(100, time.Hour)}},
			Store:    store, OnStoreError: mode, FailClosedRetryAfter: 2 * time.Second, MetricsProvider: promlimit.New(reg),
		})
		if md, err := check(t, c); err != nil || first(md, "ratelimit") == "" {
			t.Fatalf("mode %d, Redis up: %v %v", mode, err, md)
		}
		srv.Kill()
		_, err = check(t, c)
		result := "failed_open"
		if mode == grpclimit.FailClosed {
			result = "failed_closed"
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("fail-closed with Redis down: %v, want Unavailable", err)
			}
			if d, ok := grpclimit.RetryDelay(err); !ok || d != 2*time.Second {
				t.Errorf("RetryInfo %v %v, want 2 s", d, ok)
			}
		} else if err != nil {
			t.Fatalf("fail-open with Redis down: %v", err)
		}
		if n := testutil.ToFloat64(decisionsCounter(t, reg, result)); n != 1 {
			t.Errorf("%s decisions = %v, want 1", result, n)
		}
	}
}

// decisionsCounter returns the per-peer decisions counter of result.
func decisionsCounter(t *testing.T, reg *prometheus.Registry, result string) prometheus.Collector {
	t.Helper()
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "batcher", Subsystem: "grpc_limit", Name: "decisions_total",
		Help: "Rate-limit decisions by policy and result (allowed, denied, shadow_denied, failed_open, failed_closed)."},
		[]string{"policy", "result"})
	err := reg.Register(vec)
	are, ok := err.(prometheus.AlreadyRegisteredError)
	if !ok {
		t.Fatalf("decisions counter not registered by the interceptor: %v", err)
	}
	return are.ExistingCollector.(*prometheus.CounterVec).WithLabelValues("per-peer", result)
}

// With Redis gone and the local fallback deciding, a peer over its limit
// is refused whatever the place of its policy among the others (issue 24,
// item 9).
func TestRedisStoppedFallbackEveryPolicyOrder(t *testing.T) {
	perPeer := grpclimit.Policy{Name: "per-peer", Limit: limit.FixedWindow(2, time.Hour)}
	global := grpclimit.Policy{Name: "global", Limit: limit.FixedWindow(1000, time.Hour), Key: grpclimit.KeyConst("all")}
	tenant := grpclimit.Policy{Name: "tenant", Limit: limit.FixedWindow(500, time.Hour), Key: grpclimit.KeyConst("t1")}
	srv := redistest.StartServer(t)
	store, err := redislimit.New(srv.Client(t), redislimit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	for _, tc := range []struct {
		name     string
		policies []grpclimit.Policy
	}{
		{"per-peer first", []grpclimit.Policy{perPeer, global}},
		{"per-peer last", []grpclimit.Policy{global, perPeer}},
		{"per-peer first of three", []grpclimit.Policy{perPeer, global, tenant}},
		{"per-peer second of three", []grpclimit.Policy{global, perPeer, tenant}},
		{"per-peer last of three", []grpclimit.Policy{global, tenant, perPeer}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			c := serveHealth(t, grpclimit.Options{Policies: tc.policies, Store: store,
				OnStoreError: grpclimit.FailFallback, StoreTimeout: 500 * time.Millisecond, MetricsProvider: promlimit.New(reg)})
			for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted, codes.ResourceExhausted} {
				md, err := check(t, c)
				if status.Code(err) != want {
					t.Fatalf("call %d: %v, want %v", i, err, want)
				}
				if rl := first(md, "ratelimit"); !strings.HasPrefix(rl, `"per-peer"`) {
					t.Errorf("call %d: ratelimit %q, want the per-peer policy described", i, rl)
				}
				if d, ok := grpclimit.RetryDelay(err); want != codes.OK && (!ok || d <= 0) {
					t.Errorf("call %d: RetryInfo %v %v, want a delay", i, d, ok)
				}
			}
			if n := testutil.ToFloat64(decisionsCounter(t, reg, "failed_open")); n != 0 {
				t.Errorf("failed_open decisions = %v, want 0", n)
			}
		})
	}
}

// A store already wrapped by limit.WithFailurePolicy keeps its own
// settings: with Redis stopped, its FailClosed refusals carry its Probe
// (5 s) in RetryInfo, not the interceptor's FailClosedRetryAfter (the
// default 1 s, or 2 s), with one policy and with two.
func TestRedisStoppedPreWrappedStoreKeepsItsProbe(t *testing.T) {
	for _, c := range []struct {
		name  string
		two   bool
		retry time.Duration
	}{
		{"one policy, default retry", false, 0},
		{"two policies, retry 2 s", true, 2 * time.Second},
	} {
		srv := redistest.StartServer(t)
		store, err := redislimit.New(srv.Client(t), redislimit.Options{})
		if err != nil {
			t.Fatal(err)
		}
		wrapped, err := limit.WithFailurePolicy(store, limit.FailureOptions{Mode: limit.FailClosed, Probe: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ps := []grpclimit.Policy{{Name: "per-peer", Limit: limit.FixedWindow(100, time.Hour)}}
		if c.two {
			ps = append(ps, grpclimit.Policy{Name: "all", Limit: limit.TokenBucket(100, limit.PerSecond(10)), Key: grpclimit.KeyConst("all")})
		}
		cl := serveHealth(t, grpclimit.Options{Policies: ps, Store: wrapped, FailClosedRetryAfter: c.retry})
		if _, err := check(t, cl); err != nil {
			t.Fatalf("%s, Redis up: %v", c.name, err)
		}
		srv.Kill()
		_, err = check(t, cl)
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("%s, Redis down: %v, want Unavailable", c.name, err)
		}
		if d, ok := grpclimit.RetryDelay(err); !ok || d != 5*time.Second {
			t.Errorf("%s: RetryInfo %v %v, want 5 s (the wrapped store's Probe)", c.name, d, ok)
		}
	}
}
