package grpclimit_test

import (
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
	"github.com/costwise/batcher/middleware/httplimit"
)

// With Redis stopped in the middle of the test, a fail-closed server
// refuses calls with UNAVAILABLE and a RetryInfo, and a fail-open one
// serves them; both count the outcome.
func TestRedisStoppedFailClosedAndOpen(t *testing.T) {
	for _, mode := range []httplimit.FailMode{httplimit.FailClosed, httplimit.FailOpen} {
		srv := redistest.StartServer(t)
		store, err := redislimit.New(srv.Client(t), redislimit.Options{})
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		c := serveHealth(t, grpclimit.Options{
			Policies: []grpclimit.Policy{{Name: "per-peer", Limit: limit.FixedWindow(100, time.Hour)}},
			Store:    store, OnStoreError: mode, FailClosedRetryAfter: 2 * time.Second, Registerer: reg,
		})
		if md, err := check(t, c); err != nil || first(md, "ratelimit") == "" {
			t.Fatalf("mode %d, Redis up: %v %v", mode, err, md)
		}
		srv.Kill()
		_, err = check(t, c)
		result := "failed_open"
		if mode == httplimit.FailClosed {
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
