package service

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ratelimiterv1 "github.com/costwise/batcher/api/ratelimiter/v1"
	"github.com/costwise/batcher/internal/redistest"
)

// hangBound is docs/limiterd.md's "given up after 1 s", written as the doc
// gives it rather than read from storeTimeout, plus a loaded machine's
// margin.
const hangBound = time.Second + 1500*time.Millisecond

// TestPromiseStoreHangEveryPolicy: with Redis frozen (SIGSTOP: only
// timeouts end the calls), each failure policy answers on all four APIs
// within about 1 s. fail_closed: POST /limit 503 with Retry-After, POST
// /json 503, Unavailable on both gRPC APIs. fallback: every limit decided
// in memory at limit ÷ replicas (3 over 3 replicas admits 1), on all four.
// fail_open: every call allowed.
func TestPromiseStoreHangEveryPolicy(t *testing.T) {
	skipWithColdLeases(t, "a key leased before Redis froze is decided without it")
	for _, policy := range []string{"fail_closed", "fallback", "fail_open"} {
		t.Run(policy, func(t *testing.T) { testStoreHang(t, policy) })
	}
}

func testStoreHang(t *testing.T, policy string) {
	srv := redistest.StartServer(t)
	dir := t.TempDir()
	writeFile(t, dir, "gw.yaml", envoyRules)
	p := start(t, fmt.Sprintf("store: redis\non_store_failure: %s\nreplicas: 3\n"+
		"algo_settings: {capacity: 3, rate: 0.0001}\nbackends:\n  redis: {addr: %q}\n", policy, srv.Addr()), "--rules", dir)
	cc := dial(t, p.grpc)
	keyed := ratelimiterv1.NewRateLimiterClient(cc)
	envoy := rlsv3.NewRateLimitServiceClient(cc)
	// Connections open and scripts loaded before the freeze.
	if r := p.post("/limit", "", "X-Client-Key", uuid.NewString()); r.StatusCode != http.StatusOK {
		t.Fatalf("POST /limit with Redis up: %d", r.StatusCode)
	}
	if _, err := envoy.ShouldRateLimit(context.Background(), envoyReq("remote_address", uuid.NewString())); err != nil {
		t.Fatalf("ShouldRateLimit with Redis up: %v", err)
	}
	redistest.AwayFromWindowEdge(time.Hour, 30*time.Second)
	srv.Freeze(t)
	defer srv.Thaw(t)

	restKey, grpcKey, jsonIP, envoyIP := uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()
	jsonBody := fmt.Sprintf(`{"domain":"gw","descriptors":[{"entries":[{"key":"remote_address","value":%q}]}]}`, jsonIP)
	// timed runs call and fails the test when it took past hangBound.
	timed := func(name string, call func(ctx context.Context)) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		began := time.Now()
		call(ctx)
		if took := time.Since(began); took > hangBound {
			t.Errorf("%s with Redis frozen, %s: answered after %v, want within %v", name, policy, took, hangBound)
		}
	}
	for i := range 2 {
		timed(fmt.Sprintf("POST /limit call %d", i+1), func(context.Context) {
			r := p.post("/limit", "", "X-Client-Key", restKey)
			want := map[string][]int{
				"fail_closed": {http.StatusServiceUnavailable, http.StatusServiceUnavailable},
				"fallback":    {http.StatusOK, http.StatusTooManyRequests},
				"fail_open":   {http.StatusOK, http.StatusOK},
			}[policy][i]
			if r.StatusCode != want {
				t.Errorf("POST /limit call %d with Redis frozen, %s: %d, want %d", i+1, policy, r.StatusCode, want)
			}
			if r.StatusCode != http.StatusOK && r.Header.Get("Retry-After") == "" {
				t.Errorf("POST /limit call %d with Redis frozen, %s: %d without Retry-After", i+1, policy, r.StatusCode)
			}
		})
		timed(fmt.Sprintf("POST /json call %d", i+1), func(context.Context) {
			want := map[string][]int{
				"fail_closed": {http.StatusServiceUnavailable, http.StatusServiceUnavailable},
				"fallback":    {http.StatusOK, http.StatusTooManyRequests},
				"fail_open":   {http.StatusOK, http.StatusOK},
			}[policy][i]
			if got := p.postDrain("/json", jsonBody); got != want {
				t.Errorf("POST /json call %d with Redis frozen, %s: %d, want %d", i+1, policy, got, want)
			}
		})
		timed(fmt.Sprintf("ratelimiter.v1 call %d", i+1), func(ctx context.Context) {
			r, err := keyed.Allow(ctx, &ratelimiterv1.AllowRequest{Key: grpcKey})
			switch {
			case policy == "fail_closed" && status.Code(err) != codes.Unavailable:
				t.Errorf("Allow call %d with Redis frozen, %s: %v %v, want Unavailable", i+1, policy, r, err)
			case policy == "fallback" && (err != nil || r.Allowed != (i == 0)):
				t.Errorf("Allow call %d with Redis frozen, %s: %v %v, want allowed=%v", i+1, policy, r, err, i == 0)
			case policy == "fail_open" && (err != nil || !r.Allowed):
				t.Errorf("Allow call %d with Redis frozen, %s: %v %v, want allowed", i+1, policy, r, err)
			}
		})
		timed(fmt.Sprintf("ShouldRateLimit call %d", i+1), func(ctx context.Context) {
			r, err := envoy.ShouldRateLimit(ctx, envoyReq("remote_address", envoyIP))
			over := err == nil && r.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT
			switch {
			case policy == "fail_closed" && status.Code(err) != codes.Unavailable:
				t.Errorf("ShouldRateLimit call %d with Redis frozen, %s: %v %v, want Unavailable", i+1, policy, r, err)
			case policy == "fallback" && (err != nil || over != (i == 1)):
				t.Errorf("ShouldRateLimit call %d with Redis frozen, %s: %v %v, want over=%v", i+1, policy, r, err, i == 1)
			case policy == "fail_open" && (err != nil || over):
				t.Errorf("ShouldRateLimit call %d with Redis frozen, %s: %v %v, want OK", i+1, policy, r, err)
			}
		})
	}
}
