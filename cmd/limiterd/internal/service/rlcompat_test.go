package service

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/costwise/batcher/envoyrl"
	"github.com/costwise/batcher/internal/redistest"
)

// compatRules have a limit of each kind the metrics name: a first-level
// key, a shadow_mode one, a second-level one and an unlimited one.
const compatRules = `
domain: gw
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: s
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: hour, requests_per_unit: 5}
  - key: free
    rate_limit: {unlimited: true}
`

// startAddr reads an address the start line of p reports under key.
func startAddr(t *testing.T, p *proc, key string) string {
	t.Helper()
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		if !strings.Contains(line, "limiterd started") {
			continue
		}
		var attrs map[string]any
		if err := json.Unmarshal([]byte(line), &attrs); err != nil {
			t.Fatal(err)
		}
		if a, ok := attrs[key].(string); ok {
			return a
		}
	}
	t.Fatalf("no %s address in the start line: %s", key, p.stderr.String())
	return ""
}

// rlReq is a request of domain gw: one descriptor per key/value pair, the
// request's hits_addend hits.
func rlReq(hits uint32, kv ...string) *rlsv3.RateLimitRequest {
	r := envoyReq(kv...)
	r.HitsAddend = hits
	return r
}

// hasLines fails unless every line is in the /metrics text m.
func hasLines(t *testing.T, m string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains("\n"+m, "\n"+l+"\n") {
			t.Errorf("no line %q in /metrics:\n%s", l, grepLines(m, "ratelimit_service"))
		}
	}
}

// rlSeriesLines are the six per-limit lines of labels, at the values
// given (total, within, near, over, over with local cache, shadow).
func rlSeriesLines(labels string, v ...int) []string {
	var out []string
	for i, name := range []string{"total_hits", "within_limit", "near_limit", "over_limit", "over_limit_with_local_cache", "shadow_mode"} {
		out = append(out, fmt.Sprintf("ratelimit_service_rate_limit_%s{%s} %d", name, labels, v[i]))
	}
	return out
}

// TestRatelimitMetrics: envoyproxy/ratelimit's series exist at 0 as soon
// as the rules are loaded, then count a known sequence of calls exactly.
func TestRatelimitMetrics(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "gw.yaml", compatRules)
	p := start(t, "", "--rules", dir)
	m := p.metricsText()
	var zero []string
	for _, labels := range []string{`domain="gw",key1="k"`, `domain="gw",key1="s"`, `domain="gw",key1="a",key2="b"`} {
		zero = append(zero, rlSeriesLines(labels, 0, 0, 0, 0, 0, 0)...)
	}
	zero = append(zero,
		`ratelimit_service_should_rate_limit_error{err_type="redis_error"} 0`,
		`ratelimit_service_should_rate_limit_error{err_type="service_error"} 0`,
		`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 0`,
		`ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"} 0`,
		"ratelimit_service_config_load_success 1", "ratelimit_service_config_load_error 0",
		"ratelimit_service_global_shadow_mode 0",
		`limiterd_decisions_total{api="envoy",domain="gw",result="ok",rule="gw.k"} 0`,
		`limiterd_decisions_total{api="envoy",domain="gw",result="over_limit",rule="gw.k"} 0`,
		`limiterd_decisions_total{api="envoy",domain="gw",result="shadow_over_limit",rule="gw.s"} 0`,
		`limiterd_rule_reloads_total{result="failure"} 0`,
	)
	hasLines(t, m, zero...)
	if n := seriesOf(m, "ratelimit_service_rate_limit_total_hits"); n != 3 {
		t.Fatalf("%d total_hits series at the start, want 3 (the unlimited rule has none)", n)
	}

	c := rlsv3.NewRateLimitServiceClient(dial(t, p.grpc))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	redistest.AwayFromWindowEdge(time.Hour, 10*time.Second)
	calls := []struct {
		req  *rlsv3.RateLimitRequest
		want rlsv3.RateLimitResponse_Code
	}{
		{rlReq(5, "k", "x"), rlsv3.RateLimitResponse_OK},         // 5 within
		{rlReq(4, "k", "x"), rlsv3.RateLimitResponse_OK},         // 4 within, 1 past 8: near
		{rlReq(3, "k", "x"), rlsv3.RateLimitResponse_OVER_LIMIT}, // 10 near, 11 and 12 over
		{rlReq(1, "k", "x"), rlsv3.RateLimitResponse_OVER_LIMIT}, // over
		{rlReq(3, "s", "x"), rlsv3.RateLimitResponse_OK},         // of 2 (near past 1): the 2nd near, the 3rd over, in shadow
		{&rlsv3.RateLimitRequest{Domain: "gw", Descriptors: []*rlv3.RateLimitDescriptor{{
			Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "a", Value: "1"}, {Key: "b", Value: "2"}},
		}}}, rlsv3.RateLimitResponse_OK}, // 1 within
		{rlReq(1, "free", "x"), rlsv3.RateLimitResponse_OK}, // unlimited: not counted
	}
	for i, call := range calls {
		resp, err := c.ShouldRateLimit(ctx, call.req)
		if err != nil || resp.OverallCode != call.want {
			t.Fatalf("call %d: %v %v, want %v", i, resp, err, call.want)
		}
	}
	if _, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "gw"}); err == nil {
		t.Fatal("a request without descriptors was answered")
	}
	m = p.metricsText()
	want := rlSeriesLines(`domain="gw",key1="k"`, 13, 9, 2, 3, 0, 0)
	want = append(want, rlSeriesLines(`domain="gw",key1="s"`, 3, 0, 1, 1, 0, 1)...)
	want = append(want, rlSeriesLines(`domain="gw",key1="a",key2="b"`, 1, 1, 0, 0, 0, 0)...)
	want = append(want,
		`ratelimit_service_should_rate_limit_error{err_type="service_error"} 1`,
		`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 8`,
		`ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"} 8`,
		`limiterd_decisions_total{api="envoy",domain="gw",result="over_limit",rule="gw.k"} 2`,
	)
	hasLines(t, m, want...)
}

// TestHealthcheck: GET /healthcheck and the gRPC health service answer
// healthy by default; with healthy_with_at_least_one_config_loaded, an
// empty rule directory is unhealthy until a rule file loads.
func TestHealthcheck(t *testing.T) {
	p := start(t, "")
	if code, b := p.get("http://" + p.http + "/healthcheck"); code != http.StatusOK || b != "OK" {
		t.Fatalf("/healthcheck: %d %q, want 200 OK", code, b)
	}
	if code, b := p.get("http://" + p.http + "/health"); code != http.StatusOK || b != "ok" {
		t.Fatalf("/health: %d %q", code, b)
	}

	dir := t.TempDir()
	p = start(t, "envoy: {healthy_with_at_least_one_config_loaded: true}\n", "--rules", dir, "--rules-interval", "20ms")
	hc := healthpb.NewHealthClient(dial(t, p.grpc))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	grpcStatus := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	if code, b := p.get("http://" + p.http + "/healthcheck"); code != http.StatusInternalServerError || b != "" {
		t.Fatalf("no rules: /healthcheck %d %q, want 500 and no body", code, b)
	}
	for _, svc := range []string{"", "ratelimit"} {
		if st := grpcStatus(svc); st != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("no rules: gRPC health of %q %v, want NOT_SERVING", svc, st)
		}
	}
	writeFile(t, dir, "gw.yaml", compatRules)
	waitFor(t, "healthy once a rule file loaded", func() bool {
		code, _ := p.get("http://" + p.http + "/healthcheck")
		return code == http.StatusOK
	})
	for _, svc := range []string{"", "ratelimit"} {
		if st := grpcStatus(svc); st != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("rules loaded: gRPC health of %q %v, want SERVING", svc, st)
		}
	}
	// A bad reload keeps the good rules, and the health.
	writeFile(t, dir, "bad.yaml", "domain: other\ndescriptors: [{key: x, rate_limit: {unit: fortnight}}]\n")
	waitFor(t, "the failed reload", func() bool { return strings.Contains(p.stderr.String(), "rule reload failed") })
	if code, _ := p.get("http://" + p.http + "/healthcheck"); code != http.StatusOK {
		t.Fatalf("after a failed reload: /healthcheck %d, want 200", code)
	}
}

// TestHealthStateStopping: the health turns for good when the service
// stops, whatever the rules.
func TestHealthStateStopping(t *testing.T) {
	g := health.NewServer()
	h := newHealthState(g, false)
	get := func() int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/healthcheck", nil))
		return w.Code
	}
	if get() != http.StatusOK {
		t.Fatal("not healthy at the start")
	}
	h.stop()
	h.rulesLoaded(true)
	r, err := g.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if get() != http.StatusInternalServerError || err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("stopping: /healthcheck %d, gRPC %v %v; want 500 and NOT_SERVING", get(), r, err)
	}
}

// TestRLConfig: /rlconfig lists the rules in force, on its own address
// and on the debug address; without them it is not served.
func TestRLConfig(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "gw.yaml", compatRules)
	p := start(t, "", "--rules", dir, "--rlconfig-addr", "127.0.0.1:0", "--debug-addr", "127.0.0.1:0")
	want := "gw.a.b: unit=HOUR requests_per_unit=5, shadow_mode: false, quota_mode: false\n" +
		"gw.free: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n" +
		"gw.k: unit=HOUR requests_per_unit=10, shadow_mode: false, quota_mode: false\n" +
		"gw.s: unit=HOUR requests_per_unit=2, shadow_mode: true, quota_mode: false\n"
	for _, key := range []string{"rlconfig", "debug"} {
		if code, b := p.get("http://" + startAddr(t, p, key) + "/rlconfig"); code != http.StatusOK || b != want {
			t.Fatalf("/rlconfig on the %s address: %d\n%s\nwant:\n%s", key, code, b, want)
		}
	}
	if code, _ := p.get("http://" + p.http + "/rlconfig"); code != http.StatusNotFound {
		t.Fatalf("/rlconfig on the REST port: %d, want 404", code)
	}
	q := start(t, "", "--rules", dir)
	if strings.Contains(q.stderr.String(), `"rlconfig":`) {
		t.Fatalf("/rlconfig served by default: %s", q.stderr.String())
	}
}

// TestEnvoyResponseHeaders: with response_headers on, an answer carries
// the limit, remaining count and reset of the descriptor nearest its limit
// (the over one when one is over), under the configured names.
func TestEnvoyResponseHeaders(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "gw.yaml", compatRules)
	p := start(t, "envoy:\n  response_headers: {enabled: true, reset: X-Reset}\n", "--rules", dir)
	c := rlsv3.NewRateLimitServiceClient(dial(t, p.grpc))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	redistest.AwayFromWindowEdge(time.Hour, 10*time.Second)
	headers := func(req *rlsv3.RateLimitRequest) (map[string]string, int64) {
		t.Helper()
		resp, err := c.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, h := range resp.ResponseHeadersToAdd {
			out[h.Key] = h.Value
		}
		var reset int64
		for _, st := range resp.Statuses {
			if st.DurationUntilReset != nil {
				reset = st.DurationUntilReset.Seconds
			}
		}
		return out, reset
	}
	got, reset := headers(rlReq(1, "k", "h1", "s", "h1", "free", "x"))
	if got["RateLimit-Limit"] != "2" || got["RateLimit-Remaining"] != "1" || got["X-Reset"] != strconv.FormatInt(reset, 10) || len(got) != 3 {
		t.Fatalf("headers %v (reset %d), want the shadow limit's 2, 1 left", got, reset)
	}
	got, _ = headers(rlReq(10, "k", "h1"))
	if got["RateLimit-Limit"] != "10" || got["RateLimit-Remaining"] != "0" {
		t.Fatalf("over the limit: headers %v, want 10 and 0", got)
	}
	if got, _ = headers(rlReq(1, "free", "x", "unknown", "y")); len(got) != 0 {
		t.Fatalf("no limit: headers %v, want none", got)
	}
	// They are off by default.
	q := start(t, "", "--rules", dir)
	resp, err := rlsv3.NewRateLimitServiceClient(dial(t, q.grpc)).ShouldRateLimit(ctx, rlReq(1, "k", "h2"))
	if err != nil || len(resp.ResponseHeadersToAdd) != 0 {
		t.Fatalf("by default: %v %v, want no headers", resp, err)
	}
}

// TestMergeDomainConfig: two rule files of one domain are refused, or
// merged with merge_domain_config.
func TestMergeDomainConfig(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", "domain: gw\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	second := writeFile(t, dir, "b.yaml", "domain: gw\ndescriptors:\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 2}\n")
	code, stderr := runOnce(t, "--rules", dir, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--metrics-addr", "")
	if code != 2 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, second+": duplicate domain 'gw'") {
		t.Fatalf("exit %d, %q; want 2 and one line naming %s", code, stderr, second)
	}
	p := start(t, "envoy: {merge_domain_config: true}\n", "--rules", dir)
	c := rlsv3.NewRateLimitServiceClient(dial(t, p.grpc))
	resp, err := c.ShouldRateLimit(context.Background(), rlReq(1, "a", "x", "b", "x"))
	if err != nil || resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != 1 || resp.Statuses[1].GetCurrentLimit().GetRequestsPerUnit() != 2 {
		t.Fatalf("merged: %v %v, want the limits of both files", resp, err)
	}
}

// redisCommands is the number of commands a Redis server has run, its
// INFO commands left out.
func redisCommands(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(l), ":calls=")
		if !ok || name == "cmdstat_info" {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		k, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("commandstats line %q", l)
		}
		n += k
	}
	return n
}

// TestLocalCacheAndJitterOnRedis: with local_cache_size_in_bytes, a
// counter over its limit is answered OVER_LIMIT without a Redis command;
// with expiration_jitter_max, the counters expire up to that much later
// than their window.
func TestLocalCacheAndJitterOnRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	rc := srv.Client(t)
	dir := t.TempDir()
	writeFile(t, dir, "gw.yaml", compatRules)
	p := start(t, fmt.Sprintf("store: redis\nbackends:\n  redis: {addr: %q}\nenvoy: {local_cache_size_in_bytes: 1048576, expiration_jitter_max: 1h}\n", srv.Addr()), "--rules", dir)
	c := rlsv3.NewRateLimitServiceClient(dial(t, p.grpc))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	redistest.AwayFromWindowEdge(time.Hour, 10*time.Second)
	call := func(hits uint32, want rlsv3.RateLimitResponse_Code) {
		t.Helper()
		resp, err := c.ShouldRateLimit(ctx, rlReq(hits, "k", "cached"))
		if err != nil || resp.OverallCode != want {
			t.Fatalf("%v %v, want %v", resp, err, want)
		}
	}
	call(10, rlsv3.RateLimitResponse_OK)
	call(1, rlsv3.RateLimitResponse_OVER_LIMIT)
	before := redisCommands(t, rc)
	call(2, rlsv3.RateLimitResponse_OVER_LIMIT)
	call(1, rlsv3.RateLimitResponse_OVER_LIMIT)
	if n := redisCommands(t, rc) - before; n != 0 {
		t.Fatalf("%d Redis commands for a counter in the local cache, want 0", n)
	}
	hasLines(t, p.metricsText(), rlSeriesLines(`domain="gw",key1="k"`, 14, 10, 2, 4, 3, 0)...)

	// Twenty new counters of an hour's window: each expires within its
	// window's rest plus the 1 s grace plus up to an hour, and not all
	// within the window's rest.
	var kv []string
	for i := range 20 {
		kv = append(kv, "k", "jitter-"+strconv.Itoa(i)+"-"+uuid.NewString())
	}
	if _, err := c.ShouldRateLimit(ctx, rlReq(1, kv...)); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rest := now.Truncate(time.Hour).Add(time.Hour).Sub(now) + time.Second
	keys, err := rc.Keys(ctx, "gw_k_jitter-*").Result()
	if err != nil || len(keys) != 20 {
		t.Fatalf("keys %v %v, want 20", keys, err)
	}
	past := 0
	for _, k := range keys {
		d, err := rc.PTTL(ctx, k).Result()
		if err != nil || d <= 0 || d > rest+time.Hour+time.Second {
			t.Fatalf("%s expires in %v (%v), want at most %v", k, d, err, rest+time.Hour)
		}
		if d > rest+time.Second {
			past++
		}
	}
	if past == 0 {
		t.Fatalf("no counter of 20 expires past its window's rest %v: no jitter", rest)
	}
}

// BenchmarkEnvoyObserver is the metrics' part of one descriptor's
// decision: limiterd's decision counter, and envoyproxy/ratelimit's
// statistics.
func BenchmarkEnvoyObserver(b *testing.B) {
	m := newMetrics(10_000)
	m.setDomains([]string{"gw"})
	o := envoyObserver{m}
	st := envoyrl.LimitStats{TotalHits: 1, WithinLimit: 1}
	b.Run("Descriptor", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			o.Descriptor("gw", "gw.remote_address", "ok")
		}
	})
	b.Run("Limit", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			o.Limit("gw", "gw.remote_address", st)
		}
	})
}

// TestEnvoyHeaderNamesChecked: with the headers on, a name that is not an
// HTTP header name is refused with the file and the field.
func TestEnvoyHeaderNamesChecked(t *testing.T) {
	_, err := ParseConfig("l.yaml", []byte("envoy:\n  response_headers: {enabled: true, remaining: \"Rate Limit\"}\n"))
	if err == nil || err.Error() != `limiterd: config l.yaml: envoy.response_headers.remaining: must be an HTTP header name, not "Rate Limit"` {
		t.Fatalf("%v", err)
	}
	if _, err := ParseConfig("l.yaml", []byte("envoy:\n  response_headers: {enabled: false, remaining: \"\"}\n")); err != nil {
		t.Fatalf("headers off: %v", err)
	}
}
