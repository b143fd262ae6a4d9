package service

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	ratelimiterv1 "github.com/costwise/batcher/api/ratelimiter/v1"
	"github.com/costwise/batcher/internal/redistest"
)

func TestConfigRefusedWithOneLine(t *testing.T) {
	cases := []struct {
		name, yaml, field string
	}{
		{"bad yaml", "store: [in_memory\n", "bad YAML"},
		{"unknown key", "store: in_memory\nalgo_setings: {capacity: 1}\n", "algo_setings: unknown key"},
		{"unknown nested key", "backends:\n  in_memory: {shard_count: 8}\n", "backends.in_memory.shard_count: unknown key"},
		{"unknown algorithm", "use_algo: leaky\n", "use_algo: unknown algorithm"},
		{"unknown store", "store: etcd\n", "store: unknown store"},
		{"missing parameter", "use_algo: gcra\nalgo_settings: {capacity: 5}\n", "algo_settings.rate: missing"},
		{"zero parameter", "use_algo: fixed_window\nalgo_settings: {window_size: 0, max_requests: 5}\n", "algo_settings.window_size: must be positive"},
		{"negative parameter", "algo_settings: {capacity: -1, rate: 1}\n", "algo_settings.capacity: must be positive"},
		{"not a number", "algo_settings: {capacity: lots, rate: 1}\n", "algo_settings.capacity: must be a number"},
		{"shards not a power of two", "backends:\n  in_memory: {shards_count: 100}\n", "backends.in_memory.shards_count: must be a power of two"},
		{"unknown failure policy", "on_store_failure: maybe\n", "on_store_failure: unknown policy"},
		{"bad header format", "headers: fancy\n", "headers: unknown format"},
		{"redis without address", "store: redis\nbackends:\n  redis: {addr: ''}\n", "backends.redis.addr: missing"},
		{"cold lease too short", "store: redis\nbackends:\n  redis: {local_allowance: true, cold_lease: 100ms}\n", "backends.redis.cold_lease: must be 0 (off) or from 1s to 1h"},
		{"cold lease without allowances", "store: redis\nbackends:\n  redis: {local_allowance: false, cold_lease: 1m}\n", "backends.redis.cold_lease: needs backends.redis.local_allowance"},
		{"rules directory missing", "envoy: {rules_dir: /nonexistent-limiterd-rules}\n", "envoy.rules_dir: /nonexistent-limiterd-rules (--rules) is not a directory"},
		{"size out of range, in plain digits", "limits: {max_header_bytes: 100000000}\n", "limits.max_header_bytes: must be between 1024 and 16777216, not 100000000"},
		{"duration out of range, as a duration", "envoy: {expiration_jitter_max: -1s}\n", "envoy.expiration_jitter_max: must be between 0s and 24h0m0s, not -1s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := writeFile(t, t.TempDir(), "bad.yaml", c.yaml)
			code, stderr := runOnce(t, "--config", file, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--metrics-addr", "")
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr %q", code, stderr)
			}
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], file) || !strings.Contains(lines[0], c.field) {
				t.Fatalf("stderr %q: want one line naming %s and %q", stderr, file, c.field)
			}
		})
	}
}

func TestBadRulesRefused(t *testing.T) {
	dir := t.TempDir()
	rule := writeFile(t, dir, "r.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	code, stderr := runOnce(t, "--rules", dir, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--metrics-addr", "")
	if code != 2 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, rule) || !strings.Contains(stderr, "invalid rate limit unit") {
		t.Fatalf("exit %d, stderr %q: want 2 and one line naming %s and the unit", code, stderr, rule)
	}
}

func TestRESTLimit(t *testing.T) {
	p := start(t, "use_algo: fixed_window\nalgo_settings: {window_size: 3600, max_requests: 3}\nheaders: draft\n")
	redistest.AwayFromWindowEdge(time.Hour, 10*time.Second)
	for i := range 3 {
		r := p.post("/limit", "", "X-Client-Key", "alice")
		if r.StatusCode != http.StatusOK {
			t.Fatalf("call %d: %d %s", i, r.StatusCode, body(t, r))
		}
		want := `"fixed_window";r=` + strconv.Itoa(2-i) + ";t="
		if got := r.Header.Get("RateLimit"); !strings.HasPrefix(got, want) {
			t.Fatalf("call %d: RateLimit %q, want prefix %q", i, got, want)
		}
		if got := r.Header.Get("RateLimit-Policy"); got != `"fixed_window";q=3;w=3600` {
			t.Fatalf("RateLimit-Policy %q", got)
		}
	}
	r := p.post("/limit", "", "X-Client-Key", "alice")
	if r.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("fourth call: %d", r.StatusCode)
	}
	ra, err := strconv.Atoi(r.Header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 3600 {
		t.Fatalf("Retry-After %q", r.Header.Get("Retry-After"))
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("429 Content-Type %q", ct)
	}
	// Another key has its own window.
	if r := p.post("/limit", "", "X-Client-Key", "bob", "X-Required-Tokens", "2.5"); r.StatusCode != http.StatusOK {
		t.Fatalf("bob: %d", r.StatusCode)
	}
	for _, bad := range [][]string{
		{},
		{"X-Client-Key", "carol", "X-Required-Tokens", "-1"},
		{"X-Client-Key", "carol", "X-Required-Tokens", "many"},
		{"X-Client-Key", "carol", "X-Required-Tokens", "NaN"},
	} {
		if r := p.post("/limit", "", bad...); r.StatusCode != http.StatusBadRequest {
			t.Errorf("%v: %d, want 400", bad, r.StatusCode)
		}
	}
	if code, b := p.get("http://" + p.http + "/health"); code != 200 || b != "ok" {
		t.Fatalf("/health: %d %q", code, b)
	}
	_, m := p.get("http://" + p.metrics + "/metrics")
	if !strings.Contains(m, `limiterd_decisions_total{api="rest",domain="",result="denied",rule="fixed_window"} 1`) {
		t.Fatalf("metrics lack the denied decision:\n%s", grepLines(m, "limiterd_decisions_total"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func TestGRPCAllow(t *testing.T) {
	// 10 tokens, 1 per 100 s: a slow machine cannot refill one during the test.
	p := start(t, "algo_settings: {capacity: 10, rate: 0.01}\n")
	c := ratelimiterv1.NewRateLimiterClient(dial(t, p.grpc))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// tokens 0 means 1: ten calls pass, the eleventh waits.
	for i := range 10 {
		r, err := c.Allow(ctx, &ratelimiterv1.AllowRequest{Key: "k"})
		if err != nil || !r.Allowed {
			t.Fatalf("call %d: %v %v", i, r, err)
		}
	}
	r, err := c.Allow(ctx, &ratelimiterv1.AllowRequest{Key: "k", Tokens: 1})
	if err != nil || r.Allowed || r.RetryAfter.AsDuration() <= 0 || r.RetryAfter.AsDuration() > 100*time.Second {
		t.Fatalf("eleventh call: %v %v; want denied with 0 < retryAfter <= 100 s", r, err)
	}
	r, err = c.Allow(ctx, &ratelimiterv1.AllowRequest{Key: "other", Tokens: 0.25})
	if err != nil || !r.Allowed {
		t.Fatalf("fractional tokens: %v %v", r, err)
	}
	for _, bad := range []*ratelimiterv1.AllowRequest{{Key: ""}, {Key: "k", Tokens: -2}} {
		if _, err := c.Allow(ctx, bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want InvalidArgument", bad, err)
		}
	}
}

func TestGracefulStop(t *testing.T) {
	p := start(t, "")
	if code := p.stop(); code != 0 {
		t.Fatalf("exit %d after SIGTERM: %s", code, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), `"msg":"stopped"`) {
		t.Fatalf("no stop in the log: %s", p.stderr.String())
	}
}
