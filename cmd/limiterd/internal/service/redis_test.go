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
		{"local_fallback", http.StatusOK, codes.OK, true, []codes.Code{codes.OK, codes.OK}, []bool{false, true}},
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
			if m := p.metricsText(); c.policy == "local_fallback" && !strings.Contains(m, `limiterd_memory_keys{store="keyed_fallback"} 1`) {
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
