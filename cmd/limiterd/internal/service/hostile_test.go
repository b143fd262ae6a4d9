package service

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	ratelimiterv1 "github.com/costwise/batcher/api/ratelimiter/v1"
	"github.com/costwise/batcher/internal/redistest"
)

// grpcServers are the servers every gRPC test runs against.
var grpcServers = []string{GRPCServerLean, GRPCServerGo}

// TestPprofOffByDefault: /debug/pprof/ is served nowhere unless
// --debug-addr is given, and then only there.
func TestPprofOffByDefault(t *testing.T) {
	p := start(t, "")
	for _, addr := range []string{p.http, p.metrics} {
		if code, _ := p.get("http://" + addr + "/debug/pprof/"); code != http.StatusNotFound {
			t.Errorf("/debug/pprof/ on %s: %d, want 404", addr, code)
		}
	}
	debug := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	p = start(t, "", "--debug-addr", debug)
	if code, _ := p.get("http://" + debug + "/debug/pprof/"); code != http.StatusOK {
		t.Fatalf("/debug/pprof/ on --debug-addr: %d", code)
	}
	if code, _ := p.get("http://" + p.metrics + "/debug/pprof/"); code != http.StatusNotFound {
		t.Fatalf("/debug/pprof/ on the metrics address with --debug-addr: %d, want 404", code)
	}
}

// TestCallerInputBounds: every limit on what a caller sends answers as the
// limits table says, on every API.
func TestCallerInputBounds(t *testing.T) {
	for _, gs := range grpcServers {
		t.Run(gs, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "gw.yaml", envoyRules)
			p := start(t, "", "--rules", dir, "--grpc-server", gs)
			long := strings.Repeat("k", 1025)
			if r := p.post("/limit", "", "X-Client-Key", long); r.StatusCode != http.StatusBadRequest {
				t.Errorf("POST /limit with a 1,025-byte key: %d, want 400", r.StatusCode)
			}
			if r := p.post("/limit", "", "X-Client-Key", long[:1024]); r.StatusCode != http.StatusOK {
				t.Errorf("POST /limit with a 1,024-byte key: %d, want 200", r.StatusCode)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cc := dial(t, p.grpc)
			if _, err := ratelimiterv1.NewRateLimiterClient(cc).Allow(ctx, &ratelimiterv1.AllowRequest{Key: long}); status.Code(err) != codes.InvalidArgument {
				t.Errorf("Allow with a 1,025-byte key: %v, want InvalidArgument", err)
			}
			envoy := rlsv3.NewRateLimitServiceClient(cc)
			bad := map[string]*rlsv3.RateLimitRequest{
				"long value":     envoyReq("remote_address", long),
				"65 descriptors": envoyReq(strings.Split(strings.Repeat("remote_address,1,", 65), ",")[:130]...),
				"33 entries":     {Domain: "gw", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: entries(33)}}},
			}
			for name, req := range bad {
				if _, err := envoy.ShouldRateLimit(ctx, req); status.Code(err) != codes.InvalidArgument {
					t.Errorf("ShouldRateLimit, %s: %v, want InvalidArgument", name, err)
				}
			}
			body := fmt.Sprintf(`{"domain":"gw","descriptors":[{"entries":[{"key":"remote_address","value":%q}]}]}`, long)
			if r := p.post("/json", body); r.StatusCode != http.StatusBadRequest {
				t.Errorf("/json with a long value: %d, want 400", r.StatusCode)
			}
			big := `{"domain":"gw","descriptors":[{"entries":[{"key":"a","value":"` + strings.Repeat("x", 70<<10) + `"}]}]}`
			if r := p.post("/json", big); r.StatusCode != http.StatusRequestEntityTooLarge {
				t.Errorf("/json with a 70 KiB body: %d, want 413", r.StatusCode)
			}
			if r := p.post("/limit", "", "X-Client-Key", "k", "X-Junk", strings.Repeat("j", 20<<10)); r.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("POST /limit with a 20 KiB header: %d, want 431", r.StatusCode)
			}
		})
	}
}

func entries(n int) []*rlv3.RateLimitDescriptor_Entry {
	out := make([]*rlv3.RateLimitDescriptor_Entry, n)
	for i := range out {
		out[i] = &rlv3.RateLimitDescriptor_Entry{Key: "k" + strconv.Itoa(i), Value: "v"}
	}
	return out
}

// postDrain sends a POST, reads the answer to its end and returns its
// status, leaving the connection for the next request.
func (p *proc) postDrain(path, body string) int {
	p.t.Helper()
	resp, err := http.Post("http://"+p.http+path, "application/json", strings.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// metricsText reads /metrics.
func (p *proc) metricsText() string {
	p.t.Helper()
	_, m := p.get("http://" + p.metrics + "/metrics")
	return m
}

// seriesOf counts the series of a metric in a /metrics text.
func seriesOf(m, name string) int {
	return len(regexp.MustCompile(`(?m)^`+name+`\{`).FindAllString(m, -1))
}

// gaugeOf reads a gauge's value with the given labels from a /metrics text.
func gaugeOf(t *testing.T, m, series string) float64 {
	t.Helper()
	for _, l := range strings.Split(m, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no %s in /metrics", series)
	return 0
}

// TestCallerChosenValueFloods sends a new domain, a new descriptor value
// and a new override (whose values are its metric label) on every request:
// the decision series stay within max_metric_series plus the fixed
// "other" ones, the Envoy counters within max_keys, the heap flat once
// they are full, and a caller with an
// established counter is still counted (its fourth call is over the
// limit).
func TestCallerChosenValueFloods(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "gw.yaml", envoyRules)
	p := start(t, "backends:\n  in_memory: {max_keys: 512, shards_count: 16}\nlimits: {max_metric_series: 100}\n", "--rules", dir)
	cc := dial(t, p.grpc)
	envoy := rlsv3.NewRateLimitServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	redistest.AwayFromWindowEdge(time.Hour, 30*time.Second)
	legit := func() rlsv3.RateLimitResponse_Code {
		r, err := envoy.ShouldRateLimit(ctx, envoyReq("remote_address", "legit"))
		if err != nil {
			t.Fatal(err)
		}
		return r.OverallCode
	}
	legit()
	legit()
	const n = 3000
	var heapMid int64
	for i := range n {
		if i == n/3 {
			heapMid = heapAlloc()
		}
		v := strconv.Itoa(i)
		if code := p.postDrain("/json", `{"domain":"d`+v+`","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`); code != http.StatusOK {
			t.Fatalf("/json with a new domain: %d", code)
		}
		if _, err := envoy.ShouldRateLimit(ctx, envoyReq("remote_address", "flood-"+v)); err != nil {
			t.Fatal(err)
		}
		over := &rlsv3.RateLimitRequest{Domain: "gw", Descriptors: []*rlv3.RateLimitDescriptor{{
			Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "o", Value: v}},
			Limit:   &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: 3},
		}}}
		if _, err := envoy.ShouldRateLimit(ctx, over); err != nil {
			t.Fatal(err)
		}
	}
	if grown := heapAlloc() - heapMid; grown > 4<<20 {
		t.Errorf("the heap grew %d bytes over the last %d requests of the flood", grown, 2*n/3)
	}
	if legit() != rlsv3.RateLimitResponse_OK || legit() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatal("the established caller's counter was lost in the flood")
	}
	m := p.metricsText()
	// 100 label sets, then the "other" rule of each api, domain and result.
	if s := seriesOf(m, "limiterd_decisions_total"); s > 100+16 {
		t.Fatalf("%d decision series after %d new domains and values:\n%s", s, n, grepLines(m, "decisions_total")[:2000])
	}
	// envoyproxy/ratelimit's series: 100 statistics keys (the two rules'
	// and the first overrides'), then the domain's "other".
	if s := seriesOf(m, "ratelimit_service_rate_limit_total_hits"); s > 100+1 {
		t.Fatalf("%d ratelimit_service series after %d new override values:\n%s", s, n, grepLines(m, "total_hits")[:2000])
	}
	// (Calls whose new counter found the memory store full fail open,
	// uncounted.)
	if v := gaugeOf(t, m, `ratelimit_service_rate_limit_total_hits{domain="gw",key1="other"}`); v < 100 {
		t.Fatalf("%v hits counted as key1=\"other\", want the overrides past the bound", v)
	}
	if k := gaugeOf(t, m, `limiterd_memory_keys{store="envoy"}`); k > 512 || k < 256 {
		t.Fatalf("%v Envoy counters held, want at most max_keys 512 (and the store filled)", k)
	}
}

// TestSlowClientsDoNotHoldTheService: hundreds of connections that send
// half a header, and as many that open and say nothing, hold neither
// goroutines nor memory past the timeouts, and a legitimate caller is
// served during the attack.
func TestSlowClientsDoNotHoldTheService(t *testing.T) {
	for _, gs := range grpcServers {
		t.Run(gs, func(t *testing.T) {
			p := start(t, "servers: {read_header_timeout: 300ms, grpc_handshake_timeout: 300ms}\n", "--grpc-server", gs)
			baseG, baseHeap := runtime.NumGoroutine(), heapAlloc()
			var conns []net.Conn
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			for i := range 400 {
				addr := p.http
				if i%2 == 1 {
					addr = p.grpc
				}
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, c)
				if addr == p.http {
					_, _ = io.WriteString(c, "POST /limit HTTP/1.1\r\nHost: x\r\nX-Client-Key: ")
				}
			}
			if r := p.post("/limit", "", "X-Client-Key", "legit"); r.StatusCode != http.StatusOK {
				t.Fatalf("legitimate caller during the attack: %d", r.StatusCode)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := ratelimiterv1.NewRateLimiterClient(dial(t, p.grpc)).Allow(ctx, &ratelimiterv1.AllowRequest{Key: "legit"}); err != nil {
				t.Fatalf("legitimate gRPC caller during the attack: %v", err)
			}
			// The server closes every attacking connection.
			for _, c := range conns {
				_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
				if _, err := io.Copy(io.Discard, bufio.NewReader(c)); err != nil {
					t.Fatalf("an attacking connection was left open: %v", err)
				}
			}
			waitFor(t, "goroutines back to where they were", func() bool { return runtime.NumGoroutine() <= baseG+20 })
			if grown := heapAlloc() - baseHeap; grown > 8<<20 {
				t.Fatalf("heap grew %d bytes after the attack ended", grown)
			}
		})
	}
}

func heapAlloc() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// waitFor polls cond for up to 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20 s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReflectionAndHealth: both gRPC servers list their services by server
// reflection, as grpcurl asks first, and answer grpc.health.v1.
func TestReflectionAndHealth(t *testing.T) {
	for _, gs := range grpcServers {
		t.Run(gs, func(t *testing.T) { testReflectionAndHealth(t, gs) })
	}
}

func testReflectionAndHealth(t *testing.T, gs string) {
	p := start(t, "", "--grpc-server", gs)
	cc := dial(t, p.grpc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	got := strings.Join(names, " ")
	for _, want := range []string{"ratelimiter.v1.RateLimiter", "envoy.service.ratelimit.v3.RateLimitService", "grpc.health.v1.Health"} {
		if !strings.Contains(got, want) {
			t.Errorf("reflection lists %q, without %s", got, want)
		}
	}
	h, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", h, err)
	}
}

// TestKeysWithLargeHeadersHoldOnlyTheKey sends 2,000 new keys, each in a
// request with a 6 KB junk header, to a store where no key comes back to
// rest: the heap grows by what the keys need, not by the headers they came
// in (a stored key kept its request's whole header alive: 6 KB a key).
func TestKeysWithLargeHeadersHoldOnlyTheKey(t *testing.T) {
	p := start(t, "algo_settings: {capacity: 10, rate: 0.001}\n")
	const n = 2000
	junk := strings.Repeat("j", 6<<10)
	c, err := net.Dial("tcp", p.http)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	send := func(from, to int) {
		for i := from; i < to; i++ {
			fmt.Fprintf(c, "POST /limit HTTP/1.1\r\nHost: x\r\nX-Junk: %s\r\nX-Client-Key: key-%d\r\n\r\n", junk, i)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("key %d: %d", i, resp.StatusCode)
			}
		}
	}
	send(0, 100) // the connection's buffers and the first tables
	before := heapAlloc()
	send(100, 100+n)
	if perKey := (heapAlloc() - before) / n; perKey > 1<<10 {
		t.Fatalf("%d bytes of heap per key sent with a 6 KB header", perKey)
	}
}
