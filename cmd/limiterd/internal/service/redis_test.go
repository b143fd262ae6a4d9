package service

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ratelimiterv1 "github.com/costwise/batcher/api/ratelimiter/v1"
	"github.com/costwise/batcher/internal/redistest"
)

// TestKeyedOnRedis runs POST /limit and ratelimiter.v1 on a single Redis
// and on a three-node cluster: both APIs spend from one bucket per key.
func TestKeyedOnRedis(t *testing.T) {
	configs := map[string]func(t *testing.T) string{
		"single": func(t *testing.T) string {
			redistest.Shared(t)
			return fmt.Sprintf("backends:\n  redis: {addr: %q}\n", redistest.Addr())
		},
		"cluster": func(t *testing.T) string {
			return fmt.Sprintf("backends:\n  redis: {cluster_addrs: [%s]}\n", strings.Join(redistest.StartCluster(t, 3), ", "))
		},
	}
	for name, backend := range configs {
		t.Run(name, func(t *testing.T) {
			p := start(t, "store: redis\nalgo_settings: {capacity: 4, rate: 0.0001}\n"+backend(t))
			c := ratelimiterv1.NewRateLimiterClient(dial(t, p.grpc))
			key := uuid.NewString()
			for i := range 2 {
				if r := p.post("/limit", "", "X-Client-Key", key); r.StatusCode != http.StatusOK {
					t.Fatalf("REST call %d: %d %s", i, r.StatusCode, body(t, r))
				}
				r, err := c.Allow(context.Background(), &ratelimiterv1.AllowRequest{Key: key})
				if err != nil || !r.Allowed {
					t.Fatalf("gRPC call %d: %v %v", i, r, err)
				}
			}
			if r := p.post("/limit", "", "X-Client-Key", key); r.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("fifth call: %d, want 429", r.StatusCode)
			}
			r, err := c.Allow(context.Background(), &ratelimiterv1.AllowRequest{Key: key})
			if err != nil || r.Allowed || r.RetryAfter.AsDuration() <= 0 {
				t.Fatalf("sixth call: %v %v, want denied with a retry delay", r, err)
			}
			if code, _ := p.get("http://" + p.http + "/health"); code != http.StatusOK {
				t.Fatalf("/health %d", code)
			}
		})
	}
}

// TestStoreDown stops the service's own Redis mid-test: /health turns 503,
// and each failure policy answers as configured, on every API. The Envoy
// API's local fallback counts in memory at the limit divided by the
// replicas: 3 an hour over 3 replicas admits 1.
func TestStoreDown(t *testing.T) {
	skipWithColdLeases(t, "a key leased before Redis went down is decided without it")
	cases := []struct {
		policy    string
		rest      int
		grpcCode  codes.Code
		allowed   bool
		envoyCode []codes.Code // two calls on one address
		envoyOver []bool
	}{
		{"fail_open", http.StatusOK, codes.OK, true, []codes.Code{codes.OK, codes.OK}, []bool{false, false}},
		{"fail_closed", http.StatusServiceUnavailable, codes.Unavailable, false,
			[]codes.Code{codes.Unavailable, codes.Unavailable}, []bool{false, false}},
		{"fallback", http.StatusOK, codes.OK, true, []codes.Code{codes.OK, codes.OK}, []bool{false, true}},
		{"local_fallback", http.StatusOK, codes.OK, true, []codes.Code{codes.OK, codes.OK}, []bool{false, true}}, // the former name
	}
	for _, c := range cases {
		t.Run(c.policy, func(t *testing.T) {
			srv := redistest.StartServer(t)
			dir := t.TempDir()
			writeFile(t, dir, "gw.yaml", envoyRules)
			p := start(t, fmt.Sprintf("store: redis\non_store_failure: %s\nreplicas: 3\nbackends:\n  redis: {addr: %q}\n",
				c.policy, srv.Addr()), "--rules", dir)
			if r := p.post("/limit", "", "X-Client-Key", "k"); r.StatusCode != http.StatusOK {
				t.Fatalf("with Redis up: %d", r.StatusCode)
			}
			srv.Kill()
			if code, _ := p.get("http://" + p.http + "/health"); code != http.StatusServiceUnavailable {
				t.Fatalf("/health with Redis down: %d, want 503", code)
			}
			r := p.post("/limit", "", "X-Client-Key", "k")
			if r.StatusCode != c.rest {
				t.Fatalf("POST /limit with Redis down: %d, want %d", r.StatusCode, c.rest)
			}
			if c.rest == http.StatusServiceUnavailable && r.Header.Get("Retry-After") == "" {
				t.Fatalf("503 without Retry-After")
			}
			if m := p.metricsText(); strings.HasSuffix(c.policy, "fallback") && !strings.Contains(m, `limiterd_memory_keys{store="keyed_fallback"} 1`) {
				t.Fatalf("the local fallback's keys, bounded by max_keys, are not in the metrics:\n%s", grepLines(m, "memory_keys"))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := ratelimiterv1.NewRateLimiterClient(dial(t, p.grpc)).Allow(ctx, &ratelimiterv1.AllowRequest{Key: "k"})
			if status.Code(err) != c.grpcCode || (err == nil && resp.Allowed != c.allowed) {
				t.Fatalf("Allow with Redis down: %v %v, want %v allowed=%v", resp, err, c.grpcCode, c.allowed)
			}
			envoy := rlsv3.NewRateLimitServiceClient(dial(t, p.grpc))
			redistest.AwayFromWindowEdge(time.Hour, 10*time.Second)
			ip := uuid.NewString()
			for i := range c.envoyCode {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				r, err := envoy.ShouldRateLimit(ctx, envoyReq("remote_address", ip))
				cancel()
				over := err == nil && r.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT
				if status.Code(err) != c.envoyCode[i] || over != c.envoyOver[i] {
					t.Fatalf("ShouldRateLimit %d with Redis down: %v %v, want %v over=%v", i, r, err, c.envoyCode[i], c.envoyOver[i])
				}
			}
		})
	}
}

// TestFailOpenWithinTimeout: with fail_open, every API answers OK within
// the store timeout (1 s) and a margin, when Redis is stopped, frozen
// (SIGSTOP, so that only timeouts end the calls) or was never reachable.
func TestFailOpenWithinTimeout(t *testing.T) {
	const bound = storeTimeout + 1500*time.Millisecond // a loaded machine's margin; far below the client's 3-s read timeout
	for _, fault := range []string{"stopped", "frozen", "unreachable"} {
		t.Run(fault, func(t *testing.T) {
			addr := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
			var srv *redistest.Server
			if fault != "unreachable" {
				srv = redistest.StartServer(t)
				addr = srv.Addr()
			}
			dir := t.TempDir()
			writeFile(t, dir, "gw.yaml", envoyRules)
			p := start(t, fmt.Sprintf("store: redis\non_store_failure: fail_open\nbackends:\n  redis: {addr: %q}\n", addr), "--rules", dir)
			envoy := rlsv3.NewRateLimitServiceClient(dial(t, p.grpc))
			keyed := ratelimiterv1.NewRateLimiterClient(dial(t, p.grpc))
			if srv != nil { // connections open, scripts loaded
				if r := p.post("/limit", "", "X-Client-Key", "k"); r.StatusCode != http.StatusOK {
					t.Fatalf("with Redis up: %d", r.StatusCode)
				}
				if _, err := envoy.ShouldRateLimit(context.Background(), envoyReq("remote_address", uuid.NewString())); err != nil {
					t.Fatalf("Envoy with Redis up: %v", err)
				}
			}
			switch fault {
			case "stopped":
				srv.Kill()
			case "frozen":
				srv.Freeze(t)
				defer srv.Thaw(t)
			}
			json := fmt.Sprintf(`{"domain":"gw","descriptors":[{"entries":[{"key":"remote_address","value":%q}]}]}`, uuid.NewString())
			calls := map[string]func(ctx context.Context) error{
				"POST /limit": func(context.Context) error { return statusOK(p.post("/limit", "", "X-Client-Key", "k")) },
				"POST /json":  func(context.Context) error { return statusOK(p.post("/json", json)) },
				"ratelimiter.v1": func(ctx context.Context) error {
					r, err := keyed.Allow(ctx, &ratelimiterv1.AllowRequest{Key: "k"})
					if err == nil && !r.Allowed {
						err = fmt.Errorf("denied")
					}
					return err
				},
				"Envoy": func(ctx context.Context) error {
					r, err := envoy.ShouldRateLimit(ctx, envoyReq("remote_address", uuid.NewString()))
					if err == nil && r.OverallCode != rlsv3.RateLimitResponse_OK {
						err = fmt.Errorf("overall %v", r.OverallCode)
					}
					return err
				},
			}
			for name, call := range calls {
				for i := range 2 {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					began := time.Now()
					err := call(ctx)
					took := time.Since(began)
					cancel()
					if err != nil || took > bound {
						t.Errorf("%s call %d with Redis %s: %v after %v, want OK within %v", name, i, fault, err, took, bound)
					}
				}
			}
		})
	}
}

// statusOK returns an error unless r is a 200.
func statusOK(r *http.Response) error {
	if r.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", r.StatusCode)
	}
	return nil
}

// TestGivenUpEnvoyCallsNotCounted: Envoy calls that give up (a 20-ms
// deadline) while Redis is frozen are not counted when it resumes, but
// for the at most two batches in flight (one call each, as the calls come
// one after another).
func TestGivenUpEnvoyCallsNotCounted(t *testing.T) {
	srv := redistest.StartServer(t)
	dir := t.TempDir()
	writeFile(t, dir, "gw.yaml", envoyRules)
	p := start(t, fmt.Sprintf("store: redis\non_store_failure: fail_closed\nbackends:\n  redis: {addr: %q}\n", srv.Addr()), "--rules", dir)
	envoy := rlsv3.NewRateLimitServiceClient(dial(t, p.grpc))
	redistest.AwayFromWindowEdge(time.Hour, 30*time.Second)
	ip := uuid.NewString()
	if _, err := envoy.ShouldRateLimit(context.Background(), envoyReq("remote_address", ip)); err != nil {
		t.Fatalf("with Redis up: %v", err)
	}
	srv.Freeze(t)
	for i := range 200 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err := envoy.ShouldRateLimit(ctx, envoyReq("remote_address", ip))
		cancel()
		if err == nil {
			t.Fatalf("call %d with Redis frozen answered", i)
		}
	}
	srv.Thaw(t)
	c := srv.Client(t)
	var count int64 = -1
	stable := time.Now()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		keys, err := c.Keys(context.Background(), "*"+ip+"*").Result()
		if err != nil || len(keys) != 1 {
			continue
		}
		n, err := c.Get(context.Background(), keys[0]).Int64()
		if err != nil {
			continue
		}
		if n != count {
			count, stable = n, time.Now()
		} else if time.Since(stable) > 300*time.Millisecond {
			break
		}
	}
	if count < 1 || count > 3 {
		t.Fatalf("counter at %d after 1 call and 200 that gave up; want 1 to 3", count)
	}
}
