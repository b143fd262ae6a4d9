package service

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/internal/redistest"
)

// apiRules is the runtime directory's second rule file, apiRulesReloaded
// the version that replaces it when the directory is swapped.
const (
	apiRules = `
domain: api
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 4}
  - key: route
    value: checkout
    descriptors:
      - key: remote_address
        rate_limit: {unit: day, requests_per_unit: 2}
  - key: route
    rate_limit: {unit: minute, requests_per_unit: 12}
`
	apiRulesReloaded = `
domain: api
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 7}
  - key: route
    value: checkout
    descriptors:
      - key: remote_address
        rate_limit: {unit: day, requests_per_unit: 2}
  - key: route
    rate_limit: {unit: minute, requests_per_unit: 12}
  - key: plan
    value: gold
    rate_limit: {unit: hour, requests_per_unit: 3}
`
	// reloadedLine is the line of /rlconfig that only apiRulesReloaded has.
	reloadedLine = "api.plan_gold: unit=HOUR requests_per_unit=3, shadow_mode: false, quota_mode: false"
)

// The response headers both services are told to add, by name.
const (
	limitHeader     = "X-Dropin-Limit"
	remainingHeader = "X-Dropin-Remaining"
	resetHeader     = "X-Dropin-Reset"
)

// apiMoreRules is a third rule file of the api domain, which
// MERGE_DOMAIN_CONFIG=true merges into the other's.
const apiMoreRules = `
domain: api
descriptors:
  - key: tier
    value: t1
    rate_limit: {unit: hour, requests_per_unit: 3}
`

// dropInCase is one deployment of both services: its runtime directory
// layout, its rule files and the variables it sets beyond dropInEnv's.
type dropInCase struct {
	name   string
	layout func(t *testing.T, files map[string]string) (root string, swap func(files map[string]string))
	files  map[string]string // file name to rules; api.yaml is swapped for apiRulesReloaded
	env    []string
	reset  string // the reset header's name
	// unhealthy: /healthcheck is not 200 until the swap brings rules.
	unhealthy bool
}

// TestDropInForEnvoyRatelimit runs limiterd, built from ./cmd/limiterd and
// started with no flags and no file, and envoyproxy/ratelimit, built at
// envoyRatelimitVersion, with one environment: envoyproxy/ratelimit's
// variables as a Deployment sets them, a runtime directory laid out as its
// RUNTIME_* variables read it, and the same rule files. Each has its own
// ports and its own Redis. The same requests go to both in lockstep, over
// gRPC and POST /json, and everything a caller or an operator sees must be
// the same:
//
//   - every answer: overall code, per-descriptor code, current limit and
//     remaining hits, the response headers and, for /json, the HTTP status
//     and content type. Durations until reset (the reset header too) may
//     differ by the seconds that can pass between the two calls (one, or
//     more when the pair took longer);
//   - GET /healthcheck's status and body, the gRPC health service's
//     answers, and GET /rlconfig on the debug port (its lines, which
//     envoyproxy/ratelimit prints in map order);
//   - the rules after the runtime directory is swapped, as a deployment
//     swaps it: RUNTIME_ROOT a symlink to a versioned directory replaced in
//     one rename (RUNTIME_WATCH_ROOT=true), or a Kubernetes ConfigMap
//     volume whose ..data symlink is replaced (RUNTIME_WATCH_ROOT=false,
//     RUNTIME_IGNOREDOTFILES=true);
//   - every ratelimit_service_rate_limit_* series envoyproxy/ratelimit
//     exports on PROMETHEUS_ADDR, with its labels and value; limiterd must
//     also export each with value 0 before its first hit, where
//     envoyproxy/ratelimit only has a series after it counted something.
//     Its local cache's counter, which its default statsd mapping leaves
//     unmapped (ratelimit_service_rate_limit_<domain>_<key>_over_limit_with_local_cache),
//     is compared with limiterd's ..._over_limit_with_local_cache{domain,key1};
//   - the counters in Redis (key and count), so that both can share one
//     Redis while a Deployment rolls from one to the other;
//   - LOG_FORMAT=json: every line limiterd writes is a JSON object
//     (envoyproxy/ratelimit writes its first line in logrus's text format,
//     before it reads LOG_FORMAT).
//
// The deployments: a symlinked root with header names of its own and
// NEAR_LIMIT_RATIO; a ConfigMap volume with MERGE_DOMAIN_CONFIG (a domain
// in two files), STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT and
// LOCAL_CACHE_SIZE_IN_BYTES; no rule file until the swap, with
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED (unhealthy, then healthy);
// SHADOW_MODE.
//
// Intended differences, not compared:
//   - limiterd's own metrics (limiterd_*, Go and process collectors) and
//     envoyproxy/ratelimit's others (statsd_exporter_*, ratelimit_go_*,
//     ratelimit_redis_pool_*, ratelimit_service_config_load_*,
//     ..._total_requests, ..._response_time_seconds, ..._global_shadow_mode),
//     of which those named ratelimit_service_* are listed in the log when
//     limiterd lacks them;
//   - ratelimit_service_rate_limit_<domain>_domain_not_found, which
//     envoyproxy/ratelimit names after the unknown domain a caller sent:
//     limiterd makes no metric name out of a caller's input;
//   - over_limit of a key of two levels with the local cache on: the
//     mapping's over_limit regular expression is not anchored at its end
//     and also takes ..._over_limit_with_local_cache there, so
//     envoyproxy/ratelimit's over_limit is the sum of both counters where
//     limiterd's counts the answers over the limit; the test checks that
//     sum;
//   - refusals: limiterd answers InvalidArgument over gRPC where
//     envoyproxy/ratelimit answers Unknown (Envoy takes any error as a
//     failure), and its 400 on /json says what is wrong where
//     envoyproxy/ratelimit's says "Bad Request" (status and content type
//     are compared);
//   - the gRPC health service's status for the whole server (service ""),
//     which a Kubernetes gRPC probe asks by default: envoyproxy/ratelimit
//     leaves it at grpc-go's SERVING whatever its health (only "ratelimit"
//     follows /healthcheck), limiterd makes it follow /healthcheck too;
//   - the expiry of counters, which both draw at random up to
//     EXPIRATION_JITTER_MAX_SECONDS, and the JSON formatting of /json.
func TestDropInForEnvoyRatelimit(t *testing.T) {
	theirBin := envoyRatelimitBin(t)
	ourBin := buildDropInLimiterd(t)
	two := map[string]string{"cmp.yaml": compareRules, "api.yaml": apiRules}
	cases := []dropInCase{{
		name:   "symlinked root",
		layout: dropInSymlinkedRoot,
		files:  two,
		env: []string{
			"RUNTIME_WATCH_ROOT=true", "NEAR_LIMIT_RATIO=0.5",
			"LIMIT_LIMIT_HEADER=" + limitHeader, "LIMIT_REMAINING_HEADER=" + remainingHeader, "LIMIT_RESET_HEADER=" + resetHeader,
		},
		reset: resetHeader,
	}, {
		name:   "ConfigMap volume",
		layout: dropInConfigMap,
		files:  map[string]string{"cmp.yaml": compareRules, "api.yaml": apiRules, "api-more.yaml": apiMoreRules},
		env: []string{
			"RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true", "MERGE_DOMAIN_CONFIG=true",
			"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true", "LOCAL_CACHE_SIZE_IN_BYTES=1048576",
			"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true",
		},
		reset: "RateLimit-Reset",
	}, {
		// No rule file until the swap: unhealthy until then.
		name:      "no rules yet",
		layout:    dropInSymlinkedRoot,
		files:     map[string]string{},
		env:       []string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true"},
		reset:     "RateLimit-Reset",
		unhealthy: true,
	}, {
		name:   "shadow mode",
		layout: dropInSymlinkedRoot,
		files:  two,
		env:    []string{"SHADOW_MODE=true"},
		reset:  "RateLimit-Reset",
	}}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root, swap := c.layout(t, c.files)
			theirs := startDropIn(t, "envoyproxy/ratelimit", theirBin, root, c.env, !c.unhealthy)
			ours := startDropIn(t, "limiterd", ourBin, root, c.env, !c.unhealthy)
			oursAtStart := ours.scrape(t)

			if s := compareHealth(t, ours, theirs); (s == http.StatusOK) == c.unhealthy {
				t.Fatalf("envoyproxy/ratelimit's /healthcheck answers %d", s)
			}
			compareRLConfig(t, ours, theirs, !c.unhealthy)
			compareErrors(t, ours, theirs)
			r := rand.New(rand.NewPCG(3, uint64(i)))
			over := compareRound(t, ours, theirs, r, 300, c.reset)

			next := maps.Clone(c.files)
			if len(next) == 0 {
				next = maps.Clone(two)
			}
			next["api.yaml"] = apiRulesReloaded
			swap(next)
			for _, p := range []*dropInProc{theirs, ours} {
				waitFor(t, p.name+" to load the swapped runtime directory", func() bool {
					_, body := p.get(t, p.debug, "/rlconfig")
					return slices.Contains(strings.Split(body, "\n"), reloadedLine)
				})
			}
			// The series of the rule the swap added, at 0, may follow the
			// rules' coming into force by a moment.
			var oursAfterReload map[string]float64
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				oursAfterReload = ours.scrape(t)
				if _, ok := oursAfterReload[ratelimitSeries+`total_hits{domain="api",key1="plan_gold"}`]; ok || time.Now().After(deadline) {
					break
				}
			}
			compareRLConfig(t, ours, theirs, true)
			over += compareRound(t, ours, theirs, r, 200, c.reset)
			if !t.Failed() && over == 0 {
				t.Errorf("no request went over a limit: the sequence does not exercise both answers")
			}
			if s := compareHealth(t, ours, theirs); s != http.StatusOK {
				t.Errorf("envoyproxy/ratelimit's /healthcheck answers %d with rules", s)
			}
			compareMetrics(t, ours, theirs, oursAtStart, oursAfterReload)
			compareCounters(t, ours, theirs)
			ours.checkJSONLog(t)
		})
	}
}

// dropInSymlinkedRoot lays the runtime directory out as RUNTIME_ROOT=<dir>/current,
// a symlink to a versioned directory, with the rule files in
// ratelimit/config under it; swap writes a new version beside it and
// replaces the symlink in one rename.
func dropInSymlinkedRoot(t *testing.T, files map[string]string) (string, func(map[string]string)) {
	t.Helper()
	dir := t.TempDir()
	version := 0
	write := func(files map[string]string) string {
		version++
		name := fmt.Sprintf("v%d", version)
		writeRules(t, filepath.Join(dir, name, "ratelimit", "config"), files)
		return name
	}
	current := filepath.Join(dir, "current")
	if err := os.Symlink(write(files), current); err != nil {
		t.Fatal(err)
	}
	return current, func(files map[string]string) {
		if err := os.Symlink(write(files), current+".new"); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(current+".new", current); err != nil {
			t.Fatal(err)
		}
	}
}

// dropInConfigMap lays the runtime directory out as the kubelet mounts a
// ConfigMap at RUNTIME_ROOT/ratelimit/config: the files in a hidden
// timestamped directory, ..data a symlink to it, and each file a symlink
// through ..data; swap writes a new hidden directory and replaces ..data in
// one rename, then removes the old one, as the kubelet does.
func dropInConfigMap(t *testing.T, files map[string]string) (string, func(map[string]string)) {
	t.Helper()
	root := t.TempDir()
	mount := filepath.Join(root, "ratelimit", "config")
	version := 0
	write := func(files map[string]string) string {
		version++
		name := fmt.Sprintf("..2026_12_01_00_00_0%d.%d", version, 1000+version)
		writeRules(t, filepath.Join(mount, name), files)
		for f := range files {
			if _, err := os.Lstat(filepath.Join(mount, f)); err == nil {
				continue
			}
			if err := os.Symlink(filepath.Join("..data", f), filepath.Join(mount, f)); err != nil {
				t.Fatal(err)
			}
		}
		return name
	}
	old := write(files)
	if err := os.Symlink(old, filepath.Join(mount, "..data")); err != nil {
		t.Fatal(err)
	}
	return root, func(files map[string]string) {
		name := write(files)
		if err := os.Symlink(name, filepath.Join(mount, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(mount, "..data_tmp"), filepath.Join(mount, "..data")); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(filepath.Join(mount, old)); err != nil {
			t.Fatal(err)
		}
		old = name
	}
}

// writeRules writes the rule files into dir.
func writeRules(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		writeFile(t, dir, name, body)
	}
}

// buildDropInLimiterd builds ./cmd/limiterd into the test's directory, with the
// race detector when the test has it.
func buildDropInLimiterd(t *testing.T) string {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command to build limiterd: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "limiterd")
	args := []string{"build", "-o", bin}
	if raceBuild {
		args = append(args, "-race")
	}
	out, err := exec.Command(goCmd, append(args, "github.com/costwise/batcher/cmd/limiterd")...).CombinedOutput()
	if err != nil {
		t.Fatalf("building limiterd: %v\n%s", err, out)
	}
	return bin
}

// dropInProc is one of the two services, run as a process of its own.
type dropInProc struct {
	name                       string
	redis                      *redistest.Server
	http, grpc, debug, metrics string
	client                     *http.Client // its own connections, closed at cleanup
	out                        *syncBuffer
	exited                     chan struct{}
	err                        error
}

// dropInEnv is the one environment both services get, apart from their
// ports and their Redis: envoyproxy/ratelimit's variables, a case's extra
// ones, and nothing of the test's own environment but PATH.
func dropInEnv(runtimeRoot, redisAddr string, port, grpcPort, debugPort, metricsPort int, extra []string) []string {
	return append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOST=127.0.0.1", fmt.Sprintf("PORT=%d", port),
		"GRPC_HOST=127.0.0.1", fmt.Sprintf("GRPC_PORT=%d", grpcPort),
		"DEBUG_HOST=127.0.0.1", fmt.Sprintf("DEBUG_PORT=%d", debugPort),
		"LOG_LEVEL=info", "LOG_FORMAT=json",
		"USE_STATSD=false", "USE_PROMETHEUS=true", fmt.Sprintf("PROMETHEUS_ADDR=127.0.0.1:%d", metricsPort),
		"PROMETHEUS_PATH=/metrics",
		// envoyproxy/ratelimit publishes its counters to Prometheus at each
		// flush (every 10 s by default); 1 s keeps the test short.
		"STATS_FLUSH_INTERVAL=1s",
		"RUNTIME_ROOT=" + runtimeRoot, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config",
		"BACKEND_TYPE=redis", "REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=SINGLE", "REDIS_URL=" + redisAddr,
		"REDIS_POOL_SIZE=4",
		"CACHE_KEY_PREFIX=dropin_",
		"LIMIT_RESPONSE_HEADERS_ENABLED=true",
	}, extra...)
}

// startDropIn starts bin with its own Redis and ports and the environment
// of dropInEnv, waits until /healthcheck answers (200 if healthy) and
// every port accepts connections, and stops it at cleanup: SIGTERM, then SIGKILL
// after 10 s. limiterd must exit with status 0 on SIGTERM.
func startDropIn(t *testing.T, name, bin, runtimeRoot string, extraEnv []string, healthy bool) *dropInProc {
	t.Helper()
	p := &dropInProc{name: name, redis: redistest.StartServer(t), out: &syncBuffer{}, exited: make(chan struct{}),
		client: &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}}
	ports := [4]int{}
	for i := range ports {
		ports[i] = redistest.FreePort(t)
	}
	p.http, p.grpc, p.debug, p.metrics = loopback(ports[0]), loopback(ports[1]), loopback(ports[2]), loopback(ports[3])
	cmd := exec.Command(bin)
	cmd.Env = dropInEnv(runtimeRoot, p.redis.Addr(), ports[0], ports[1], ports[2], ports[3], extraEnv)
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.client.CloseIdleConnections()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.exited
			if name == "limiterd" {
				t.Errorf("limiterd did not stop within 10 s of SIGTERM")
			}
		}
		if name == "limiterd" && p.err != nil && !t.Failed() {
			t.Errorf("limiterd on SIGTERM: %v\n%s", p.err, lastLines(p.out.String(), 10))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		why := p.notReady(healthy)
		if why == "" {
			break
		}
		select {
		case <-p.exited:
			t.Fatalf("%s exited (%v) with the environment\n  %s\n%s", name, p.err, strings.Join(cmd.Env, "\n  "), lastLines(p.out.String(), 20))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not serve within 30 s: %s\n%s", name, why, lastLines(p.out.String(), 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return p
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// notReady says what does not answer yet: /healthcheck (with 200 if
// healthy), or one of the ports; "" when everything does.
func (p *dropInProc) notReady(healthy bool) string {
	for _, port := range []struct{ name, addr string }{{"GRPC_PORT", p.grpc}, {"DEBUG_PORT", p.debug}, {"PROMETHEUS_ADDR", p.metrics}} {
		c, err := net.DialTimeout("tcp", port.addr, time.Second)
		if err != nil {
			return fmt.Sprintf("%s %s: %v", port.name, port.addr, err)
		}
		c.Close()
	}
	resp, err := p.client.Get("http://" + p.http + "/healthcheck")
	if err != nil {
		return fmt.Sprintf("PORT %s: %v", p.http, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if healthy && resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("GET /healthcheck on %s: %d", p.http, resp.StatusCode)
	}
	return ""
}

// get fetches path from addr and returns the status and the body.
func (p *dropInProc) get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := p.client.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("%s GET %s: %v", p.name, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s GET %s: %v", p.name, path, err)
	}
	return resp.StatusCode, string(b)
}

// compareHealth compares GET /healthcheck and the gRPC health service's
// answers for "ratelimit" (the service name envoyproxy/ratelimit reports
// its health under) and for the server (""), which at limiterd must follow
// /healthcheck (TestDropInForEnvoyRatelimit says why), and returns
// envoyproxy/ratelimit's HTTP status.
func compareHealth(t *testing.T, ours, theirs *dropInProc) int {
	t.Helper()
	sa, ba := ours.get(t, ours.http, "/healthcheck")
	sb, bb := theirs.get(t, theirs.http, "/healthcheck")
	if sa != sb || ba != bb {
		t.Errorf("/healthcheck: limiterd answers %d %q, envoyproxy/ratelimit %d %q", sa, ba, sb, bb)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, svc := range []string{"", "ratelimit"} {
		var got [2]string
		for i, p := range []*dropInProc{ours, theirs} {
			resp, err := healthpb.NewHealthClient(dial(t, p.grpc)).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			got[i] = resp.GetStatus().String()
			if err != nil {
				got[i] = status.Code(err).String()
			}
		}
		want := got[1]
		if svc == "" {
			want = healthpb.HealthCheckResponse_NOT_SERVING.String()
			if sb == http.StatusOK {
				want = healthpb.HealthCheckResponse_SERVING.String()
			}
		}
		if got[0] != want {
			t.Errorf("grpc.health.v1 Check %q: limiterd answers %s, want %s (envoyproxy/ratelimit answers %s, /healthcheck %d)", svc, got[0], want, got[1], sb)
		}
	}
	return sb
}

// compareErrors sends requests both must refuse: over gRPC, an error for
// both, over POST /json the same status and content type. The gRPC codes
// and the bodies are logged, not compared (TestDropInForEnvoyRatelimit
// says why).
func compareErrors(t *testing.T, ours, theirs *dropInProc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b := rlsv3.NewRateLimitServiceClient(dial(t, ours.grpc)), rlsv3.NewRateLimitServiceClient(dial(t, theirs.grpc))
	user := []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u9"}}}}
	for _, req := range []*rlsv3.RateLimitRequest{{Domain: "cmp"}, {Descriptors: user}} {
		ra, errA := a.ShouldRateLimit(ctx, req)
		rb, errB := b.ShouldRateLimit(ctx, req)
		if errB == nil {
			t.Fatalf("envoyproxy/ratelimit answers %v to %v", rb, req)
		}
		if errA == nil {
			t.Errorf("gRPC %v: limiterd answers %v, envoyproxy/ratelimit refuses it: %v", req, ra, errB)
			continue
		}
		t.Logf("gRPC %v: limiterd refuses it with %v, envoyproxy/ratelimit with %v", req, status.Code(errA), status.Code(errB))
	}
	for _, body := range []string{"{not json", `{"domain":"cmp"}`, `{"descriptors":[{"entries":[{"key":"user","value":"u9"}]}]}`} {
		var got, bodies [2]string
		for i, p := range []*dropInProc{ours, theirs} {
			resp, err := p.client.Post("http://"+p.http+"/json", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatalf("%s POST /json: %v", p.name, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			got[i] = fmt.Sprintf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
			bodies[i] = string(b)
		}
		if got[0] != got[1] {
			t.Errorf("POST /json %s: limiterd answers %s, envoyproxy/ratelimit %s", body, got[0], got[1])
		}
		t.Logf("POST /json %s: %s; limiterd says %q, envoyproxy/ratelimit %q", body, got[1], bodies[0], bodies[1])
	}
}

// compareRLConfig compares GET /rlconfig on the debug port, line by line
// in sorted order; rules says whether there are any.
func compareRLConfig(t *testing.T, ours, theirs *dropInProc, rules bool) {
	t.Helper()
	sa, ba := ours.get(t, ours.debug, "/rlconfig")
	sb, bb := theirs.get(t, theirs.debug, "/rlconfig")
	if sb != http.StatusOK || rules && !strings.Contains(bb, "cmp.user: unit=HOUR requests_per_unit=5") {
		t.Fatalf("envoyproxy/ratelimit's /rlconfig: %d %q", sb, bb)
	}
	la, lb := dropInLines(ba), dropInLines(bb)
	if sa != sb || !slices.Equal(la, lb) {
		t.Errorf("/rlconfig: limiterd answers %d\n  %s\nenvoyproxy/ratelimit %d\n  %s",
			sa, strings.Join(la, "\n  "), sb, strings.Join(lb, "\n  "))
	}
}

func dropInLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return out
}

// apiMenu is what dropInRequest draws the api domain's descriptors from.
var apiMenu = [][]string{
	{"remote_address", "10.0.0.1"}, {"remote_address", "10.0.0.2"},
	{"route", "checkout", "remote_address", "10.0.0.1"}, {"route", "checkout", "remote_address", "10.0.0.3"},
	{"route", "checkout"}, {"route", "search"}, {"plan", "gold"}, {"plan", "free"}, {"tier", "t1"},
}

// dropInRequest draws a request of compareRules' domain, of the api
// domain or, now and then, of a domain no rule names.
func dropInRequest(r *rand.Rand) *rlsv3.RateLimitRequest {
	switch r.IntN(10) {
	case 0:
		return &rlsv3.RateLimitRequest{Domain: "nosuch", Descriptors: []*rlv3.RateLimitDescriptor{{
			Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u1"}}}}}
	case 1, 2, 3:
		req := &rlsv3.RateLimitRequest{Domain: "api", HitsAddend: uint32(r.IntN(3))}
		for range 1 + r.IntN(2) {
			kv := apiMenu[r.IntN(len(apiMenu))]
			d := &rlv3.RateLimitDescriptor{}
			for i := 0; i < len(kv); i += 2 {
				d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
			}
			if r.IntN(6) == 0 {
				d.HitsAddend = wrapperspb.UInt64(uint64(r.IntN(3)))
			}
			req.Descriptors = append(req.Descriptors, d)
		}
		return req
	}
	return randomRequest(r)
}

// compareRound sends n requests to both services in lockstep, every
// other one over POST /json, and returns how many had a descriptor over
// its limit.
// It stops at the first difference: the counters differ from then on.
func compareRound(t *testing.T, ours, theirs *dropInProc, r *rand.Rand, n int, reset string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, b := rlsv3.NewRateLimitServiceClient(dial(t, ours.grpc)), rlsv3.NewRateLimitServiceClient(dial(t, theirs.grpc))
	over := 0
	for i := range n {
		// Both calls inside one window of the per-minute rules.
		redistest.AwayFromWindowEdge(time.Minute, 2*time.Second)
		req := dropInRequest(r)
		start := time.Now()
		var ra, rb *rlsv3.RateLimitResponse
		var diff string
		if i%2 == 0 {
			var err error
			if ra, err = a.ShouldRateLimit(ctx, req); err != nil {
				t.Errorf("request %d to limiterd over gRPC: %v\n%v", i, err, req)
				return over
			}
			if rb, err = b.ShouldRateLimit(ctx, req); err != nil {
				t.Fatalf("request %d to envoyproxy/ratelimit over gRPC: %v\n%v", i, err, req)
			}
		} else {
			var ha, hb string
			ra, ha = ours.postJSON(t, req)
			rb, hb = theirs.postJSON(t, req)
			if ha != hb {
				diff = fmt.Sprintf("/json: limiterd answers %s, envoyproxy/ratelimit %s", ha, hb)
			}
		}
		if diff == "" {
			// Durations until reset may differ by the seconds the pair took.
			diff = responseDiff(ra, rb, reset, 1+int64(time.Since(start)/time.Second))
		}
		if diff != "" {
			api := "gRPC"
			if i%2 == 1 {
				api = "/json"
			}
			t.Errorf("request %d over %s: %s\nrequest: %s\nlimiterd:             %s\nenvoyproxy/ratelimit: %s",
				i, api, diff, prototext.Format(req), prototext.Format(ra), prototext.Format(rb))
			return over
		}
		for _, st := range rb.GetStatuses() {
			if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
				over++ // also in shadow mode, which answers OK overall
				break
			}
		}
	}
	t.Logf("%d requests, %d over the limit, the same answers", n, over)
	return over
}

// postJSON sends req to POST /json and returns the decoded answer and the
// HTTP status and content type (nil when the body is not an answer).
func (p *dropInProc) postJSON(t *testing.T, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, string) {
	t.Helper()
	body, err := protojson.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := p.client.Post("http://"+p.http+"/json", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("%s POST /json: %v", p.name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s POST /json: %v", p.name, err)
	}
	status := fmt.Sprintf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	out := &rlsv3.RateLimitResponse{}
	if err := protojson.Unmarshal(b, out); err != nil {
		return nil, fmt.Sprintf("%s %q", status, b)
	}
	return out, status
}

// responseDiff says how two answers differ, or returns "". Durations until
// reset and the reset header (named reset) may differ by slack seconds.
func responseDiff(ours, theirs *rlsv3.RateLimitResponse, reset string, slack int64) string {
	if ours == nil || theirs == nil {
		return "no answer to compare"
	}
	a, b := proto.Clone(ours).(*rlsv3.RateLimitResponse), proto.Clone(theirs).(*rlsv3.RateLimitResponse)
	if len(a.Statuses) == len(b.Statuses) {
		for i, x := range a.Statuses {
			y := b.Statuses[i]
			if (x.DurationUntilReset == nil) != (y.DurationUntilReset == nil) {
				return fmt.Sprintf("status %d: duration_until_reset present in one only", i)
			}
			if d := x.DurationUntilReset.GetSeconds() - y.DurationUntilReset.GetSeconds(); d < -slack || d > slack {
				return fmt.Sprintf("status %d: duration_until_reset %v and %v", i, x.DurationUntilReset.AsDuration(), y.DurationUntilReset.AsDuration())
			}
			x.DurationUntilReset, y.DurationUntilReset = nil, nil
		}
	}
	if len(a.ResponseHeadersToAdd) == len(b.ResponseHeadersToAdd) {
		for i, x := range a.ResponseHeadersToAdd {
			y := b.ResponseHeadersToAdd[i]
			if !strings.EqualFold(x.Key, reset) || !strings.EqualFold(y.Key, reset) {
				continue
			}
			if secondsApart(x, y, slack) {
				y.Value = x.Value
			}
		}
	}
	if !proto.Equal(a, b) {
		return "the answers differ"
	}
	return ""
}

// secondsApart reports whether two headers hold integers at most slack
// apart.
func secondsApart(x, y *corev3.HeaderValue, slack int64) bool {
	u, err1 := strconv.ParseInt(x.Value, 10, 64)
	v, err2 := strconv.ParseInt(y.Value, 10, 64)
	return err1 == nil && err2 == nil && u-v >= -slack && u-v <= slack
}

// scrape reads the Prometheus text exposition on PROMETHEUS_ADDR into
// series (name and sorted labels) and values.
func (p *dropInProc) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	status, body := p.get(t, p.metrics, "/metrics")
	if status != http.StatusOK {
		t.Fatalf("%s /metrics: %d %s", p.name, status, body)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		series, value, err := parseSample(line)
		if err != nil {
			t.Fatalf("%s /metrics: %v in %q", p.name, err, line)
		}
		out[series] = value
	}
	return out
}

// parseSample parses one sample line of the text exposition format:
// name, optional {labels}, value, optional timestamp.
func parseSample(line string) (string, float64, error) {
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return "", 0, fmt.Errorf("no value")
	}
	name, rest := line[:i], line[i:]
	var labels []string
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, ", ")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, `="`)
			if eq < 0 {
				return "", 0, fmt.Errorf("bad label")
			}
			key := rest[:eq]
			rest = rest[eq+2:]
			var v strings.Builder
			for {
				if rest == "" {
					return "", 0, fmt.Errorf("unterminated label value")
				}
				c := rest[0]
				rest = rest[1:]
				if c == '"' {
					break
				}
				if c == '\\' && rest != "" {
					c = rest[0]
					rest = rest[1:]
					if c == 'n' {
						c = '\n'
					}
				}
				v.WriteByte(c)
			}
			labels = append(labels, key+"="+strconv.Quote(v.String()))
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return "", 0, fmt.Errorf("no value")
	}
	value, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return "", 0, err
	}
	sort.Strings(labels)
	return name + "{" + strings.Join(labels, ",") + "}", value, nil
}

// ratelimitSeries is the prefix of the series compared, those of
// envoyproxy/ratelimit's default statsd mapping for its per-descriptor
// counters.
const ratelimitSeries = "ratelimit_service_rate_limit_"

// mappedRatelimitSeries reports whether a series is one of the five the
// mapping names (total_hits, over_limit, near_limit, within_limit,
// shadow_mode); the others under the prefix are statsd names it leaves
// unmapped, with what a caller sent in the metric's name.
func mappedRatelimitSeries(series string) bool {
	name, _, _ := strings.Cut(series, "{")
	switch strings.TrimPrefix(name, ratelimitSeries) {
	case "total_hits", "over_limit", "near_limit", "within_limit", "shadow_mode":
		return true
	}
	return false
}

// compareMetrics waits until envoyproxy/ratelimit has published its
// counters (two scrapes a flush apart agree) and checks that limiterd
// exports each of its per-descriptor series with the same value, and
// exported it with value 0 before it counted anything (at its start, or
// after the reload for the rules the reload added).
func compareMetrics(t *testing.T, ours, theirs *dropInProc, atStart, afterReload map[string]float64) {
	t.Helper()
	var want map[string]float64
	waitFor(t, "envoyproxy/ratelimit's counters to settle", func() bool {
		prev := want
		time.Sleep(1500 * time.Millisecond)
		want = theirs.scrape(t)
		return prev != nil && sameSeries(prev, want, ratelimitSeries) && want[ratelimitSeries+`total_hits{domain="cmp",key1="user"}`] > 0
	})
	got := ours.scrape(t)
	// limiterd's over_limit_with_local_cache series by the name
	// envoyproxy/ratelimit's mapping leaves them under.
	localCache := map[string]string{}
	for series := range got {
		name, labels := splitSeries(series)
		if name != ratelimitSeries+"over_limit_with_local_cache" {
			continue
		}
		key := labels["domain"] + "." + labels["key1"]
		if k2, ok := labels["key2"]; ok {
			key += "." + k2
		}
		localCache[escapeStatsdName("ratelimit.service.rate_limit."+key+".over_limit_with_local_cache")+"{}"] = series
	}
	var compared, other []string
	for series, v := range want {
		if !strings.HasPrefix(series, "ratelimit_service_") {
			continue
		}
		if !strings.HasPrefix(series, ratelimitSeries) {
			if name, _ := splitSeries(series); !slices.Contains(other, name) && !hasMetric(got, name) {
				other = append(other, name)
			}
			continue
		}
		if !mappedRatelimitSeries(series) {
			if ourSeries, ok := localCache[series]; ok {
				compared = append(compared, series)
				if g := got[ourSeries]; g != v {
					t.Errorf("metrics: %s is %v at envoyproxy/ratelimit, %s is %v at limiterd", series, v, ourSeries, g)
				}
			} else {
				t.Logf("not compared (unmapped by envoyproxy/ratelimit's default mapping): %s %v", series, v)
			}
			continue
		}
		compared = append(compared, series)
		g, ok := got[series]
		name, labels := splitSeries(series)
		if _, deep := labels["key2"]; deep && name == ratelimitSeries+"over_limit" {
			// The mapping's over_limit regular expression is not anchored
			// at its end, so for a key of two levels it also takes
			// ...over_limit_with_local_cache: envoyproxy/ratelimit's
			// over_limit is then the sum of both, limiterd's over_limit
			// the answers over the limit alone.
			cached := got[ratelimitSeries+"over_limit_with_local_cache"+strings.TrimPrefix(series, name)]
			if ok && g+cached == v && cached > 0 {
				t.Logf("metrics: %s is %v at envoyproxy/ratelimit, over_limit %v + over_limit_with_local_cache %v at limiterd", series, v, g, cached)
				g = v
			}
		}
		if !ok {
			t.Errorf("metrics: envoyproxy/ratelimit exports %s %v; limiterd does not", series, v)
		} else if g != v {
			t.Errorf("metrics: %s is %v at envoyproxy/ratelimit, %v at limiterd", series, v, g)
		}
		if z, ok := atStart[series]; ok && z == 0 {
			continue
		} else if z, ok := afterReload[series]; ok && z == 0 {
			continue
		}
		t.Errorf("metrics: limiterd did not export %s with value 0 before its first hit (at start: %v, after the reload: %v)",
			series, describe(atStart, series), describe(afterReload, series))
	}
	sort.Strings(compared)
	sort.Strings(other)
	if len(compared) < 10 {
		t.Errorf("only %d series compared: %v", len(compared), compared)
	}
	t.Logf("%d series of envoyproxy/ratelimit compared", len(compared))
	if len(other) > 0 {
		t.Logf("envoyproxy/ratelimit's other metrics that limiterd does not export (not compared): %s", strings.Join(other, ", "))
	}
}

// splitSeries takes a series as scrape names it apart: the metric's name
// and its labels.
func splitSeries(series string) (string, map[string]string) {
	name, rest, _ := strings.Cut(series, "{")
	labels := map[string]string{}
	for rest != "}" && rest != "" {
		key, quoted, ok := strings.Cut(rest, "=")
		if !ok {
			break
		}
		q, err := strconv.QuotedPrefix(quoted)
		if err != nil {
			break
		}
		labels[key], _ = strconv.Unquote(q)
		rest = strings.TrimPrefix(quoted[len(q):], ",")
	}
	return name, labels
}

// escapeStatsdName is the metric name the statsd exporter gives a statsd
// name no mapping matches: every character but a letter, a digit or '_'
// made '_'.
func escapeStatsdName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

// hasMetric reports whether m holds a series of the metric name.
func hasMetric(m map[string]float64, name string) bool {
	for series := range m {
		if strings.HasPrefix(series, name+"{") {
			return true
		}
	}
	return false
}

func describe(m map[string]float64, series string) string {
	if v, ok := m[series]; ok {
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return "absent"
}

// sameSeries reports whether a and b hold the same series under prefix,
// with the same values.
func sameSeries(a, b map[string]float64, prefix string) bool {
	n := 0
	for k, v := range a {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		n++
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	for k := range b {
		if strings.HasPrefix(k, prefix) {
			n--
		}
	}
	return n == 0
}

// compareCounters checks that both Redis servers hold the same counters
// (key and count), each with an expiry. A counter of a per-minute window
// that has ended may have expired on one side only, as both draw their
// expiry's jitter at random: one that only one side holds is let through
// when its window (the key's last part) is over and it expires within
// 60 s plus EXPIRATION_JITTER_MAX_SECONDS' default 300 s.
func compareCounters(t *testing.T, ours, theirs *dropInProc) {
	t.Helper()
	ctx := context.Background()
	type counter struct {
		value string
		ttl   time.Duration
	}
	read := func(p *dropInProc) map[string]counter {
		c := p.redis.Client(t)
		keys, err := c.Keys(ctx, "*").Result()
		if err != nil {
			t.Fatalf("%s's Redis: %v", p.name, err)
		}
		out := map[string]counter{}
		for _, k := range keys {
			v, err := c.Get(ctx, k).Result()
			if err == redis.Nil {
				continue // expired since KEYS
			}
			if err != nil {
				t.Fatalf("%s's Redis: GET %s: %v", p.name, k, err)
			}
			ttl, err := c.TTL(ctx, k).Result()
			if err != nil || ttl <= 0 {
				t.Errorf("%s's Redis: %s has no expiry (%v, %v)", p.name, k, ttl, err)
			}
			out[k] = counter{v, ttl}
		}
		return out
	}
	endedMinute := func(key string, c counter) bool {
		i := strings.LastIndexByte(key, '_')
		start, err := strconv.ParseInt(key[i+1:], 10, 64)
		return err == nil && c.ttl <= 360*time.Second && time.Unix(start+60, 0).Before(time.Now())
	}
	got, want := read(ours), read(theirs)
	if len(want) == 0 {
		t.Fatal("envoyproxy/ratelimit's Redis holds no counters")
	}
	var diffs []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			if endedMinute(k, v) {
				t.Logf("%s = %s at envoyproxy/ratelimit (expiring in %v), expired at limiterd", k, v.value, v.ttl)
				continue
			}
			diffs = append(diffs, fmt.Sprintf("%s = %s at envoyproxy/ratelimit, absent at limiterd", k, v.value))
		} else if g.value != v.value {
			diffs = append(diffs, fmt.Sprintf("%s = %s at envoyproxy/ratelimit, %s at limiterd", k, v.value, g.value))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			if endedMinute(k, g) {
				t.Logf("%s = %s at limiterd (expiring in %v), expired at envoyproxy/ratelimit", k, g.value, g.ttl)
				continue
			}
			diffs = append(diffs, fmt.Sprintf("%s = %s at limiterd, absent at envoyproxy/ratelimit", k, g.value))
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Errorf("Redis counters differ:\n  %s", strings.Join(diffs, "\n  "))
	}
	t.Logf("%d counters in Redis, %d differ", len(want), len(diffs))
}

// checkJSONLog checks that every line the process wrote is a JSON object.
func (p *dropInProc) checkJSONLog(t *testing.T) {
	t.Helper()
	s := bufio.NewScanner(strings.NewReader(p.out.String()))
	s.Buffer(nil, 1<<20)
	n := 0
	for s.Scan() {
		line := s.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		n++
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Errorf("LOG_FORMAT=json: %s wrote a line that is not a JSON object: %q", p.name, line)
			return
		}
	}
	if n == 0 {
		t.Errorf("LOG_FORMAT=json, LOG_LEVEL=info: %s wrote no line", p.name)
	}
}

// TestDropInHarness checks what TestDropInForEnvoyRatelimit relies on
// against envoyproxy/ratelimit alone: that it starts with dropInEnv and
// the runtime directory, and that its answers, headers, /rlconfig and
// metrics are what its rules give by hand.
func TestDropInHarness(t *testing.T) {
	bin := envoyRatelimitBin(t)
	root, _ := dropInSymlinkedRoot(t, map[string]string{"cmp.yaml": compareRules, "api.yaml": apiRules})
	p := startDropIn(t, "envoyproxy/ratelimit", bin, root, []string{"NEAR_LIMIT_RATIO=0.5",
		"LIMIT_LIMIT_HEADER=" + limitHeader, "LIMIT_REMAINING_HEADER=" + remainingHeader, "LIMIT_RESET_HEADER=" + resetHeader}, true)
	redistest.AwayFromWindowEdge(time.Hour, 10*time.Second)
	c := rlsv3.NewRateLimitServiceClient(dial(t, p.grpc))
	req := &rlsv3.RateLimitRequest{Domain: "cmp", Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u1"}}}}}
	for i := 1; i <= 6; i++ {
		resp, err := c.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		wantCode, remaining := rlsv3.RateLimitResponse_OK, 5-i
		if i == 6 {
			wantCode, remaining = rlsv3.RateLimitResponse_OVER_LIMIT, 0
		}
		s := resp.GetStatuses()
		if resp.OverallCode != wantCode || len(s) != 1 || s[0].LimitRemaining != uint32(remaining) ||
			s[0].CurrentLimit.GetRequestsPerUnit() != 5 || s[0].CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR ||
			s[0].DurationUntilReset.GetSeconds() <= 0 || s[0].DurationUntilReset.GetSeconds() > 3600 {
			t.Fatalf("hit %d: %v", i, resp)
		}
		h := map[string]string{}
		for _, x := range resp.ResponseHeadersToAdd {
			h[x.Key] = x.Value
		}
		if h[limitHeader] != "5" || h[remainingHeader] != strconv.Itoa(remaining) || h[resetHeader] == "" {
			t.Fatalf("hit %d: headers %v", i, h)
		}
	}
	if resp, status := p.postJSON(t, req); status != "429 application/json" || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("/json: %s %v", status, resp)
	}
	if s, b := p.get(t, p.http, "/healthcheck"); s != http.StatusOK || b != "OK" {
		t.Fatalf("/healthcheck: %d %q", s, b)
	}
	_, body := p.get(t, p.debug, "/rlconfig")
	if !slices.Contains(dropInLines(body), "cmp.user: unit=HOUR requests_per_unit=5, shadow_mode: false, quota_mode: false") {
		t.Fatalf("/rlconfig: %q", body)
	}
	// 5 per hour, NEAR_LIMIT_RATIO=0.5: hits 3 to 5 are near the limit
	// (above floor(5*0.5)), 6 and 7 (the /json call) over it.
	var m map[string]float64
	defer func() {
		if t.Failed() {
			t.Logf("%v", m)
		}
	}()
	waitFor(t, "the counters in /metrics", func() bool {
		m = p.scrape(t)
		return m[`ratelimit_service_rate_limit_total_hits{domain="cmp",key1="user"}`] == 7 &&
			m[`ratelimit_service_rate_limit_over_limit{domain="cmp",key1="user"}`] == 2 &&
			m[`ratelimit_service_rate_limit_near_limit{domain="cmp",key1="user"}`] == 3 &&
			m[`ratelimit_service_rate_limit_within_limit{domain="cmp",key1="user"}`] == 5
	})
}

// TestDropInComparisons checks the drop-in test's own comparisons: that
// they tell the differences that matter and let through only the second
// that may pass between two calls.
func TestDropInComparisons(t *testing.T) {
	answer := func(remaining uint32, reset int64, resetValue string) *rlsv3.RateLimitResponse {
		return &rlsv3.RateLimitResponse{
			OverallCode: rlsv3.RateLimitResponse_OK,
			Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
				Code:               rlsv3.RateLimitResponse_OK,
				CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 5, Unit: rlsv3.RateLimitResponse_RateLimit_HOUR},
				LimitRemaining:     remaining,
				DurationUntilReset: durationpb.New(time.Duration(reset) * time.Second),
			}},
			ResponseHeadersToAdd: []*corev3.HeaderValue{
				{Key: limitHeader, Value: "5"}, {Key: remainingHeader, Value: strconv.Itoa(int(remaining))}, {Key: resetHeader, Value: resetValue},
			},
		}
	}
	same := []struct{ a, b *rlsv3.RateLimitResponse }{
		{answer(3, 100, "100"), answer(3, 100, "100")},
		{answer(3, 100, "100"), answer(3, 101, "99")},
	}
	for i, c := range same {
		if d := responseDiff(c.a, c.b, resetHeader, 1); d != "" {
			t.Errorf("same %d: %s", i, d)
		}
	}
	noHeaders := answer(3, 100, "100")
	noHeaders.ResponseHeadersToAdd = nil
	overLimit := answer(3, 100, "100")
	overLimit.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	differ := []struct{ a, b *rlsv3.RateLimitResponse }{
		{answer(3, 100, "100"), answer(2, 100, "100")},
		{answer(3, 100, "100"), answer(3, 102, "100")},
		{answer(3, 100, "100"), answer(3, 100, "102")},
		{answer(3, 100, "100"), answer(3, 100, "soon")},
		{answer(3, 100, "100"), noHeaders},
		{answer(3, 100, "100"), overLimit},
		{answer(3, 100, "100"), nil},
	}
	for i, c := range differ {
		if d := responseDiff(c.a, c.b, resetHeader, 1); d == "" {
			t.Errorf("differ %d: no difference found", i)
		}
	}

	for line, want := range map[string]string{
		`up 1`:                                  `up{}`,
		`a_total{z="1",b="x\"y\\"} 2.5 123`:     `a_total{b="x\"y\\",z="1"}`,
		`m{key1="path_/api/*",domain="cmp",} 0`: `m{domain="cmp",key1="path_/api/*"}`,
	} {
		series, _, err := parseSample(line)
		if err != nil || series != want {
			t.Errorf("parseSample(%q) = %q, %v; want %q", line, series, err, want)
		}
	}
	for _, bad := range []string{`up`, `up{a="1} 2`, `up{a} 1`, `up{} x`} {
		if _, _, err := parseSample(bad); err == nil {
			t.Errorf("parseSample(%q): no error", bad)
		}
	}
}
