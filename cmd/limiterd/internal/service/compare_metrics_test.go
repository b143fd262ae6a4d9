package service

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/costwise/batcher/internal/redistest"
)

// TestSameMetricsAsEnvoyRatelimit sends the same random requests (one to
// three descriptors of compatRules, hits_addend 0 to 3) to limiterd and to
// envoyproxy/ratelimit, both with response headers and a local cache, and
// compares every answer, headers included, then their
// ratelimit_service_rate_limit_* series. It is opt-in, as
// TestSameAnswersAsEnvoyRatelimit is (scripts/compare-envoy-ratelimit).
//
// The series differ where envoyproxy/ratelimit's statsd-exporter mapping
// does: it exports over_limit_with_local_cache of a one-level key under a
// name of its own, ratelimit_service_rate_limit_<domain>_<key>_over_limit_with_local_cache,
// and adds it to over_limit for a key of two levels or more (its pattern
// is not anchored); it exports no series before its first hit.
func TestSameMetricsAsEnvoyRatelimit(t *testing.T) {
	bin := os.Getenv("LIMITERD_ENVOY_RATELIMIT_BIN")
	if bin == "" {
		t.Skip("set LIMITERD_ENVOY_RATELIMIT_BIN to envoyproxy/ratelimit's service_cmd (scripts/compare-envoy-ratelimit)")
	}
	redistest.Shared(t)
	theirGRPC, theirMetrics := startEnvoyRatelimitWith(t, bin, compatRules,
		"LIMIT_RESPONSE_HEADERS_ENABLED=true", "LOCAL_CACHE_SIZE_IN_BYTES=1048576", "EXPIRATION_JITTER_MAX_SECONDS=0")
	dir := t.TempDir()
	writeFile(t, dir, "gw.yaml", compatRules)
	p := start(t, fmt.Sprintf("store: redis\nbackends:\n  redis: {addr: %q}\nenvoy: {key_prefix: %q, local_cache_size_in_bytes: 1048576, response_headers: {enabled: true}}\n",
		redistest.Addr(), "ours-"+uuid.NewString()+"_"), "--rules", dir)
	ours, theirs := rlsv3.NewRateLimitServiceClient(dial(t, p.grpc)), rlsv3.NewRateLimitServiceClient(dial(t, theirGRPC))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	redistest.AwayFromWindowEdge(time.Hour, time.Minute)
	r := rand.New(rand.NewPCG(1, 2))
	keys := [][]string{{"k"}, {"s"}, {"a", "b"}, {"free"}}
	for i := range 400 {
		req := &rlsv3.RateLimitRequest{Domain: "gw", HitsAddend: uint32(r.IntN(4))}
		for range 1 + r.IntN(3) {
			d := &rlv3.RateLimitDescriptor{}
			for _, k := range keys[r.IntN(len(keys))] {
				d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: k, Value: strconv.Itoa(r.IntN(3))})
			}
			req.Descriptors = append(req.Descriptors, d)
		}
		a, err := ours.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := theirs.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		// The two answers may fall on either side of a second.
		for _, resp := range []*rlsv3.RateLimitResponse{a, b} {
			for _, st := range resp.Statuses {
				st.DurationUntilReset = nil
			}
			for _, h := range resp.ResponseHeadersToAdd {
				if h.Key == "RateLimit-Reset" {
					h.Value = "(reset)"
				}
			}
		}
		if !proto.Equal(a, b) {
			t.Fatalf("request %d %v:\nlimiterd:             %v\nenvoyproxy/ratelimit: %v", i, req, a, b)
		}
	}

	want := map[string]float64{} // their series, from ours
	for _, l := range strings.Split(p.metricsText(), "\n") {
		name, v, ok := strings.Cut(l, " ")
		if !ok || !strings.HasPrefix(name, "ratelimit_service_rate_limit_") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatal(err)
		}
		if f == 0 {
			continue
		}
		deep := strings.Contains(name, "key2=")
		if strings.HasPrefix(name, "ratelimit_service_rate_limit_over_limit_with_local_cache{") {
			if deep {
				name = strings.Replace(name, "_with_local_cache", "", 1)
			} else {
				labels := strings.Split(strings.Trim(strings.TrimPrefix(name, "ratelimit_service_rate_limit_over_limit_with_local_cache"), "{}"), ",")
				name = "ratelimit_service_rate_limit"
				for _, lv := range labels {
					_, v, _ := strings.Cut(lv, "=")
					name += "_" + strings.Trim(v, `"`)
				}
				name += "_over_limit_with_local_cache"
			}
		}
		want[name] += f
	}
	var got map[string]float64
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, m := p.get("http://" + theirMetrics + "/metrics")
		got = map[string]float64{}
		for _, l := range strings.Split(m, "\n") {
			name, v, ok := strings.Cut(l, " ")
			if ok && strings.HasPrefix(name, "ratelimit_service_rate_limit_") {
				got[name], _ = strconv.ParseFloat(v, 64)
			}
		}
		if fmt.Sprint(got) == fmt.Sprint(want) || time.Now().After(deadline) {
			break
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("envoyproxy/ratelimit's series:\n%v\nwant, from limiterd's:\n%v", got, want)
	}
	t.Logf("%d series agree", len(want))
}

// startEnvoyRatelimitWith runs envoyproxy/ratelimit on the shared Redis
// with rules, Prometheus on and the extra environment, and returns its
// gRPC and Prometheus addresses.
func startEnvoyRatelimitWith(t *testing.T, bin, rules string, env ...string) (grpcAddr, metricsAddr string) {
	t.Helper()
	root := t.TempDir()
	cfgDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, cfgDir, "rules.yaml", rules)
	port := func() string { return strconv.Itoa(redistest.FreePort(t)) }
	grpcPort, promPort := port(), port()
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(),
		"USE_STATSD=false", "USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:"+promPort, "STATS_FLUSH_INTERVAL=50ms",
		"LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redistest.Addr(),
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
		"PORT="+port(), "GRPC_PORT="+grpcPort, "DEBUG_PORT="+port(),
		"CACHE_KEY_PREFIX=theirs-"+uuid.NewString()+"_"), env...)
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(log.String(), "Listening for gRPC") {
		if time.Now().After(deadline) {
			t.Fatalf("envoyproxy/ratelimit did not start: %s", log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return "127.0.0.1:" + grpcPort, "127.0.0.1:" + promPort
}
