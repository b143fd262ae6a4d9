package service

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/costwise/batcher/internal/redistest"
)

// TestSameMetricsAsEnvoyRatelimit runs limiterd and envoyproxy/ratelimit
// with the same environment (envoyproxy/ratelimit's variables only: the
// same runtime directory, Redis, Prometheus, response headers and local
// cache; their own ports and key prefixes), sends both the same random
// requests (one to three descriptors of compatRules, hits_addend 0 to 3),
// and compares /healthcheck, /rlconfig, every answer, headers included,
// then their ratelimit_service_rate_limit_* series. envoyproxy/ratelimit is
// built at the pinned version (envoyRatelimitBin).
//
// The series differ where envoyproxy/ratelimit's statsd-exporter mapping
// does: it exports over_limit_with_local_cache of a one-level key under a
// name of its own, ratelimit_service_rate_limit_<domain>_<key>_over_limit_with_local_cache,
// and adds it to over_limit for a key of two levels or more (its pattern
// is not anchored); it exports no series before its first hit.
func TestSameMetricsAsEnvoyRatelimit(t *testing.T) {
	bin := envoyRatelimitBin(t)
	redistest.Shared(t)
	env := map[string]string{
		"USE_STATSD": "false", "USE_PROMETHEUS": "true", "STATS_FLUSH_INTERVAL": "50ms",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redistest.Addr(),
		"RUNTIME_ROOT": runtimeDir(t, map[string]string{"gw.yaml": compatRules}), "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false",
		"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LOCAL_CACHE_SIZE_IN_BYTES": "1048576",
	}
	theirs := startEnvoyRatelimitWith(t, bin, env)
	env["CACHE_KEY_PREFIX"] = "ours-" + uuid.NewString() + "_"
	env["PROMETHEUS_ADDR"] = "127.0.0.1:0"
	p := startEnv(t, env)
	// The same /healthcheck and /rlconfig (whose lines envoyproxy/ratelimit
	// writes in no particular order).
	for _, path := range []string{"/healthcheck", "/rlconfig"} {
		ourAddr, theirAddr := p.http, theirs.http
		if path == "/rlconfig" {
			ourAddr, theirAddr = startAddr(t, p, "rlconfig"), theirs.debug
		}
		code, a := p.get("http://" + ourAddr + path)
		theirCode, b := p.get("http://" + theirAddr + path)
		if sortedLines(a) != sortedLines(b) || code != theirCode {
			t.Fatalf("%s: limiterd %d\n%s\nenvoyproxy/ratelimit %d\n%s", path, code, a, theirCode, b)
		}
	}
	ours, their := rlsv3.NewRateLimitServiceClient(dial(t, p.grpc)), rlsv3.NewRateLimitServiceClient(dial(t, theirs.grpc))
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
		b, err := their.ShouldRateLimit(ctx, req)
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
		_, m := p.get("http://" + theirs.metrics + "/metrics")
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

func sortedLines(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	sort.Strings(l)
	return strings.Join(l, "\n")
}

// ratelimitAddrs are the addresses of an envoyproxy/ratelimit.
type ratelimitAddrs struct{ http, grpc, debug, metrics string }

// startEnvoyRatelimitWith runs envoyproxy/ratelimit with env, on ports
// of its own under a key prefix of its own. A port picked free can be
// taken by another test's server before envoyproxy/ratelimit binds it,
// which it only logs ("Failed to open ... listener"); a dial would then
// reach the other server. So a start counts as ready only once the process
// itself listens on all its ports (the Prometheus one with USE_PROMETHEUS
// true), and one that logs a failure is stopped and made again on other
// ports.
func startEnvoyRatelimitWith(t *testing.T, bin string, env map[string]string) ratelimitAddrs {
	t.Helper()
	return startEnvoyRatelimitOn(t, bin, env, func() int { return redistest.FreePort(t) })
}

// startEnvoyRatelimitOn is startEnvoyRatelimitWith with the ports picked by
// pick.
func startEnvoyRatelimitOn(t *testing.T, bin string, env map[string]string, pick func() int) ratelimitAddrs {
	t.Helper()
	for attempt := 1; ; attempt++ {
		addrs, log, ok := tryEnvoyRatelimit(t, bin, env, pick)
		if ok {
			return addrs
		}
		if attempt == 3 {
			t.Fatalf("envoyproxy/ratelimit could not open its listeners in 3 starts:\n%s", log)
		}
	}
}

// tryEnvoyRatelimit is one start of startEnvoyRatelimitOn; ok false when
// a listener could not be opened (the process is then stopped).
func tryEnvoyRatelimit(t *testing.T, bin string, env map[string]string, pick func() int) (ratelimitAddrs, string, bool) {
	t.Helper()
	httpPort, grpcPort, debugPort, promPort := pick(), pick(), pick(), pick()
	p := strconv.Itoa
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "LOG_LEVEL=warn", "PROMETHEUS_ADDR=127.0.0.1:"+p(promPort),
		"HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
		"PORT="+p(httpPort), "GRPC_PORT="+p(grpcPort), "DEBUG_PORT="+p(debugPort),
		"CACHE_KEY_PREFIX=theirs-"+uuid.NewString()+"_")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var stopOnce sync.Once
	stop := func() { stopOnce.Do(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) }
	t.Cleanup(stop)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if strings.Contains(log.String(), "Failed to open") {
			stop()
			return ratelimitAddrs{}, log.String(), false
		}
		own, err := listeningPorts(cmd.Process.Pid)
		if err != nil {
			t.Fatalf("the listening ports of envoyproxy/ratelimit: %v", err)
		}
		if own[httpPort] && own[grpcPort] && own[debugPort] && (own[promPort] || env["USE_PROMETHEUS"] != "true") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("envoyproxy/ratelimit listened on %v of ports %d, %d, %d, %d within 20 s:\n%s",
				own, httpPort, grpcPort, debugPort, promPort, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	a := func(port int) string { return "127.0.0.1:" + p(port) }
	return ratelimitAddrs{http: a(httpPort), grpc: a(grpcPort), debug: a(debugPort), metrics: a(promPort)}, "", true
}

// listeningPorts returns the TCP ports on which process pid itself listens:
// the local ports of /proc/net/tcp and tcp6 entries in state LISTEN whose
// socket is one of the process's open files. A port some other process
// holds is not among them.
func listeningPorts(pid int) (map[int]bool, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		// A file closed since the listing is simply not counted.
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil {
			if ino, ok := strings.CutPrefix(l, "socket:["); ok {
				inodes[strings.TrimSuffix(ino, "]")] = true
			}
		}
	}
	ports := map[int]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] {
				continue
			}
			_, hexPort, _ := strings.Cut(f[1], ":")
			if port, err := strconv.ParseInt(hexPort, 16, 32); err == nil {
				ports[int(port)] = true
			}
		}
	}
	return ports, nil
}

// TestEnvoyRatelimitStartedAgainWhenAPortIsTaken holds, with a server of
// its own, the port startEnvoyRatelimitOn picks first for
// envoyproxy/ratelimit's debug listener: the start must not take the held
// port for envoyproxy/ratelimit's (a dial there is answered, by the holder)
// but start it again on other ports, where /rlconfig is its own.
func TestEnvoyRatelimitStartedAgainWhenAPortIsTaken(t *testing.T) {
	bin := envoyRatelimitBin(t)
	redistest.Shared(t)
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "the holder")
	})}
	go srv.Serve(held)
	t.Cleanup(func() { srv.Close() })
	heldPort := held.Addr().(*net.TCPAddr).Port
	picks := 0
	pick := func() int {
		picks++
		if picks == 3 { // the first start's debug port
			return heldPort
		}
		return redistest.FreePort(t)
	}
	addrs := startEnvoyRatelimitOn(t, bin, map[string]string{
		"USE_STATSD": "false", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redistest.Addr(),
		"RUNTIME_ROOT": runtimeDir(t, map[string]string{"gw.yaml": hourRule(5)}), "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false",
	}, pick)
	if picks < 8 {
		t.Fatalf("ports picked: %d, want a second start (8 picks or more)", picks)
	}
	if addrs.debug == held.Addr().String() {
		t.Fatalf("the debug address is the held port %s", addrs.debug)
	}
	resp, err := http.Get("http://" + addrs.debug + "/rlconfig")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "gw.remote_address") {
		t.Fatalf("GET /rlconfig on %s: %d %q, want envoyproxy/ratelimit's configuration", addrs.debug, resp.StatusCode, body)
	}
}
