package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

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
// and each failure policy answers as configured.
func TestStoreDown(t *testing.T) {
	cases := []struct {
		policy   string
		rest     int
		grpcCode codes.Code
		allowed  bool
	}{
		{"fail_open", http.StatusOK, codes.OK, true},
		{"fail_closed", http.StatusServiceUnavailable, codes.Unavailable, false},
		{"local_fallback", http.StatusOK, codes.OK, true},
	}
	for _, c := range cases {
		t.Run(c.policy, func(t *testing.T) {
			srv := redistest.StartServer(t)
			p := start(t, fmt.Sprintf("store: redis\non_store_failure: %s\nbackends:\n  redis: {addr: %q}\n", c.policy, srv.Addr()))
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
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := ratelimiterv1.NewRateLimiterClient(dial(t, p.grpc)).Allow(ctx, &ratelimiterv1.AllowRequest{Key: "k"})
			if status.Code(err) != c.grpcCode || (err == nil && resp.Allowed != c.allowed) {
				t.Fatalf("Allow with Redis down: %v %v, want %v allowed=%v", resp, err, c.grpcCode, c.allowed)
			}
		})
	}
}
