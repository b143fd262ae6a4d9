package httplimit_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/redislimit"
	"github.com/costwise/batcher/middleware/httplimit"
	"github.com/costwise/batcher/middleware/promlimit"
)

// redisOptions returns middleware options on a Redis store of a
// redis-server this test owns, with a short probe so recovery is quick.
func redisOptions(t *testing.T, mode httplimit.FailMode) (*redistest.Server, httplimit.Options, *prometheus.Registry) {
	t.Helper()
	srv := redistest.StartServer(t)
	store, err := redislimit.New(srv.Client(t), redislimit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	return srv, httplimit.Options{
		Policies:             []httplimit.Policy{{Name: "per-ip", Limit: limit.FixedWindow(4, time.Hour)}},
		Store:                store,
		OnStoreError:         mode,
		FallbackReplicas:     2,
		StoreTimeout:         500 * time.Millisecond,
		FailClosedRetryAfter: 1500 * time.Millisecond,
		MetricsProvider:      promlimit.New(reg),
	}, reg
}

func decisions(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "batcher_http_limit_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func storeErrors(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	n, err := testutil.GatherAndCount(reg, "batcher_http_limit_store_errors_total")
	if err != nil || n != 1 {
		t.Fatalf("store errors metric: %d series, %v", n, err)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "batcher_http_limit_store_errors_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

func TestRedisStoppedFailOpen(t *testing.T) {
	srv, opts, reg := redisOptions(t, httplimit.FailOpen)
	ts := serve(t, opts)
	res := get(t, ts)
	if res.code != 200 || parseDraft(t, res).r != 3 {
		t.Fatalf("with Redis up: %d %v", res.code, res.h)
	}
	srv.Kill()
	for i := 0; i < 6; i++ { // more than the limit: nothing is limited while Redis is down
		res := get(t, ts)
		if res.code != 200 || res.h.Get("RateLimit") != "" {
			t.Fatalf("Redis down, request %d: %d %v; want admitted without headers", i, res.code, res.h)
		}
	}
	if n := decisions(t, reg, "failed_open"); n != 6 {
		t.Errorf("failed_open decisions = %v, want 6", n)
	}
	if n := storeErrors(t, reg); n < 1 {
		t.Errorf("store errors = %v", n)
	}
}

func TestRedisStoppedFailClosed(t *testing.T) {
	srv, opts, reg := redisOptions(t, httplimit.FailClosed)
	ts := serve(t, opts)
	if res := get(t, ts); res.code != 200 {
		t.Fatalf("with Redis up: %d", res.code)
	}
	srv.Kill()
	res := get(t, ts)
	if res.code != 503 || res.h.Get("Retry-After") != "2" {
		t.Fatalf("Redis down: %d Retry-After %q; want 503 with Retry-After 2 (1.5 s rounded up)", res.code, res.h.Get("Retry-After"))
	}
	if p := problem(t, res); p["status"] != float64(503) {
		t.Errorf("problem %v", p)
	}
	if n := decisions(t, reg, "failed_closed"); n != 1 {
		t.Errorf("failed_closed decisions = %v, want 1", n)
	}
	// Redis back, empty: requests are decided on it again once the probe
	// delay has passed.
	srv.Restart(t)
	deadline := time.Now().Add(20 * time.Second)
	for get(t, ts).code != 200 {
		if time.Now().After(deadline) {
			t.Fatal("still refused 20 s after Redis came back")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestRedisStoppedLocalFallback(t *testing.T) {
	srv, opts, reg := redisOptions(t, httplimit.FailFallback)
	ts := serve(t, opts)
	if res := get(t, ts); res.code != 200 {
		t.Fatalf("with Redis up: %d", res.code)
	}
	srv.Kill()
	// The fallback decides locally at the limit divided by 2 replicas.
	for i, want := range []int{200, 200, 429} {
		res := get(t, ts)
		if res.code != want {
			t.Fatalf("fallback request %d: %d, want %d", i, res.code, want)
		}
		if d := parseDraft(t, res); d.q != 2 {
			t.Errorf("fallback headers describe quota %d, want the local 2", d.q)
		}
	}
	if n := storeErrors(t, reg); n < 1 {
		t.Errorf("store errors = %v", n)
	}
}

// A store that does not answer cannot hold a request past StoreTimeout.
func TestRedisPausedTimeout(t *testing.T) {
	srv, opts, reg := redisOptions(t, httplimit.FailOpen)
	opts.StoreTimeout = 100 * time.Millisecond
	ts := serve(t, opts)
	if res := get(t, ts); res.code != 200 {
		t.Fatalf("with Redis up: %d", res.code)
	}
	admin := srv.Client(t)
	if err := admin.Do(context.Background(), "CLIENT", "PAUSE", "20000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	// No UNPAUSE: the server is killed at cleanup, paused or not.
	start := time.Now()
	res := get(t, ts)
	took := time.Since(start)
	if res.code != 200 {
		t.Errorf("paused Redis: %d, want admitted (fail-open)", res.code)
	}
	// Without the timeout the request would wait out the pause (20 s) or
	// the client's read timeout (3 s).
	t.Logf("request with a paused store took %v", took)
	if took > 2500*time.Millisecond {
		t.Errorf("request took %v with a paused store and a 100 ms timeout", took)
	}
	if n := decisions(t, reg, "failed_open"); n != 1 {
		t.Errorf("failed_open = %v", n)
	}
}

// A frozen Redis (SIGSTOP) cannot hold a request with two policies past
// StoreTimeout, with a client whose read timeout is go-redis's default and
// that leaves deadlines to it (no ContextTimeoutEnabled).
func TestRedisFrozenTwoPoliciesTimeout(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	store, err := redislimit.New(c, redislimit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	ts := serve(t, httplimit.Options{
		Policies: []httplimit.Policy{
			{Name: "per-ip", Limit: limit.FixedWindow(100, time.Hour)},
			{Name: "global", Key: func(*http.Request) string { return "all" }, Limit: limit.SlidingWindow(1000, time.Hour)},
		},
		Store: store, StoreTimeout: 100 * time.Millisecond, MetricsProvider: promlimit.New(reg),
	})
	if res := get(t, ts); res.code != 200 {
		t.Fatalf("with Redis up: %d", res.code)
	}
	srv.Freeze(t)
	defer srv.Thaw(t)
	start := time.Now()
	res := get(t, ts)
	took := time.Since(start)
	if res.code != 200 {
		t.Errorf("frozen Redis: %d, want admitted (fail-open)", res.code)
	}
	if took > 100*time.Millisecond+1200*time.Millisecond {
		t.Errorf("request took %v with a frozen store and a 100 ms StoreTimeout", took)
	}
	if n := decisions(t, reg, "failed_open"); n != 1 {
		t.Errorf("failed_open = %v, want 1", n)
	}
}

// With Redis gone and the local fallback deciding, a client over its
// per-IP limit is refused whatever the place of that policy among the
// others, with two policies or three (issue 24, item 9: with the per-IP
// policy first, the third request used to be admitted as failed_open).
func TestRedisStoppedFallbackEveryPolicyOrder(t *testing.T) {
	perIP := httplimit.Policy{Name: "per-ip", Limit: limit.FixedWindow(2, time.Hour)}
	global := httplimit.Policy{Name: "global", Limit: limit.FixedWindow(1000, time.Hour), Key: httplimit.KeyConst("all")}
	tenant := httplimit.Policy{Name: "tenant", Limit: limit.FixedWindow(500, time.Hour), Key: httplimit.KeyConst("t1")}
	srv := redistest.StartServer(t)
	store, err := redislimit.New(srv.Client(t), redislimit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	for _, tc := range []struct {
		name     string
		policies []httplimit.Policy
	}{
		{"per-ip first", []httplimit.Policy{perIP, global}},
		{"per-ip last", []httplimit.Policy{global, perIP}},
		{"per-ip first of three", []httplimit.Policy{perIP, global, tenant}},
		{"per-ip second of three", []httplimit.Policy{global, perIP, tenant}},
		{"per-ip last of three", []httplimit.Policy{global, tenant, perIP}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			ts := serve(t, httplimit.Options{Policies: tc.policies, Store: store, OnStoreError: httplimit.FailFallback,
				StoreTimeout: 500 * time.Millisecond, MetricsProvider: promlimit.New(reg)})
			for i, want := range []int{200, 200, 429, 429} {
				res := get(t, ts)
				if res.code != want {
					t.Fatalf("request %d: %d, want %d", i, res.code, want)
				}
				d := parseDraft(t, res)
				if d.policy != "per-ip" || d.q != 2 {
					t.Errorf("request %d: headers describe %q with quota %d, want per-ip with 2", i, d.policy, d.q)
				}
				if want == 429 && !d.hasRetryAfter {
					t.Errorf("request %d: 429 without Retry-After", i)
				}
			}
			if n := decisions(t, reg, "failed_open"); n != 0 {
				t.Errorf("failed_open decisions = %v, want 0: the fallback decided every request", n)
			}
		})
	}
}

// A store already wrapped by limit.WithFailurePolicy keeps its own
// settings (Options.StoreTimeout): with Redis stopped, its FailClosed
// refusals ask for its Probe (5 s), not the middleware's
// FailClosedRetryAfter (its default 1 s, or 1.5 s here), with one policy
// and with two.
func TestRedisStoppedPreWrappedStoreKeepsItsProbe(t *testing.T) {
	for _, c := range []struct {
		name  string
		two   bool
		retry time.Duration
	}{
		{"one policy, default retry", false, 0},
		{"two policies, retry 1.5 s", true, 1500 * time.Millisecond},
	} {
		srv, o, _ := redisOptions(t, httplimit.FailOpen) // the middleware's mode: not the one used
		wrapped, err := limit.WithFailurePolicy(o.Store, limit.FailureOptions{Mode: limit.FailClosed, Probe: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		o.Store, o.FailClosedRetryAfter, o.MetricsProvider = wrapped, c.retry, nil
		if c.two {
			o.Policies = append(o.Policies, httplimit.Policy{Name: "all", Limit: limit.TokenBucket(100, limit.PerSecond(10)), Key: httplimit.KeyConst("all")})
		}
		ts := serve(t, o)
		if res := get(t, ts); res.code != 200 {
			t.Fatalf("%s, Redis up: %d", c.name, res.code)
		}
		srv.Kill()
		res := get(t, ts)
		if res.code != 503 || res.h.Get("Retry-After") != "5" {
			t.Errorf("%s, Redis down: %d Retry-After %q; want 503, Retry-After 5 (the wrapped store's Probe)",
				c.name, res.code, res.h.Get("Retry-After"))
		}
		if p := problem(t, res); p["retry-after"] != float64(5) {
			t.Errorf("%s: problem %v; want retry-after 5", c.name, p)
		}
	}
}
