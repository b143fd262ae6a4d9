package service

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/costwise/batcher/internal/redistest"
)

// startEnv runs limiterd through parseFlags and Run, configured by env (an
// environment of its own) and args, on loopback ports the system picks,
// waits until it serves and stops it at cleanup.
func startEnv(t *testing.T, env map[string]string, args ...string) *proc {
	t.Helper()
	full := map[string]string{
		"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0", // /rlconfig, on a port of its own
		"USE_STATSD": "false", "LOG_LEVEL": "info", "LOG_FORMAT": "json",
	}
	for k, v := range env {
		full[k] = v
	}
	p := &proc{t: t, stderr: &syncBuffer{}, exited: make(chan struct{})}
	cfg, err := parseFlags(args, p.stderr, envOf(full))
	if err != nil {
		t.Fatalf("refused: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go func() {
		p.exitCode = ExitCode(Run(ctx, cfg))
		close(p.exited)
	}()
	t.Cleanup(func() { p.stop() })
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(p.stderr.String(), "limiterd started"); time.Sleep(10 * time.Millisecond) {
		select {
		case <-p.exited:
			t.Fatalf("limiterd exited with %d: %s", p.exitCode, p.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("limiterd did not start within 20 s: %s", p.stderr.String())
		}
	}
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		if strings.Contains(line, "limiterd started") {
			var addrs struct{ HTTP, GRPC, Metrics string }
			if err := json.Unmarshal([]byte(line), &addrs); err != nil {
				t.Fatalf("start line %q: %v", line, err)
			}
			p.http, p.grpc, p.metrics = addrs.HTTP, addrs.GRPC, addrs.Metrics
		}
	}
	return p
}

// runtimeDir writes rule files in envoyproxy/ratelimit's layout under a
// new root, root/ratelimit/config/name, and returns the root.
func runtimeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		writeFile(t, dir, name, body)
	}
	return root
}

// hourRule is a rule of domain gw: n calls an hour per remote_address.
func hourRule(n int) string {
	return fmt.Sprintf("domain: gw\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", n)
}

// overAfter calls ShouldRateLimit for one fresh address until it is over
// its limit and returns how many calls were admitted, at most max+1 calls.
func overAfter(t *testing.T, cc *grpc.ClientConn, max int) int {
	t.Helper()
	c := rlsv3.NewRateLimitServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := envoyReq("remote_address", uuid.NewString())
	for i := 0; i <= max; i++ {
		r, err := c.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if r.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			return i
		}
	}
	return max + 1
}

// TestRatelimitEnvRedis runs limiterd configured only by envoyproxy/
// ratelimit's variables against a real Redis over TCP, over a Unix socket,
// with a password and with a user and password: the rules come from
// RUNTIME_ROOT, the counters go to that Redis under CACHE_KEY_PREFIX.
func TestRatelimitEnvRedis(t *testing.T) {
	cases := []struct {
		name  string
		extra func(dir string) []string
		env   func(srv *redistest.Server, dir string) map[string]string
		opts  redis.Options // how the test reads the counters
	}{
		{"tcp", nil, func(srv *redistest.Server, _ string) map[string]string {
			return map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": srv.Addr()}
		}, redis.Options{}},
		{"unix socket", func(dir string) []string {
			return []string{"--unixsocket", filepath.Join(dir, "redis.sock"), "--unixsocketperm", "700"}
		}, func(_ *redistest.Server, dir string) map[string]string {
			return map[string]string{"REDIS_URL": filepath.Join(dir, "redis.sock")} // REDIS_SOCKET_TYPE: unix by default
		}, redis.Options{}},
		{"password", func(string) []string { return []string{"--requirepass", "s3cret"} }, func(srv *redistest.Server, _ string) map[string]string {
			return map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": srv.Addr(), "REDIS_AUTH": "s3cret"}
		}, redis.Options{Password: "s3cret"}},
		{"user and password", func(string) []string {
			return []string{"--user", "default", "off", "--user", "limiter", "on", ">pw", "~*", "&*", "+@all"}
		}, func(srv *redistest.Server, _ string) map[string]string {
			return map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": srv.Addr(), "REDIS_AUTH": "limiter:pw"}
		}, redis.Options{Username: "limiter", Password: "pw"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			var extra []string
			if c.extra != nil {
				extra = c.extra(dir)
			}
			srv := redistest.StartServer(t, extra...)
			env := c.env(srv, dir)
			prefix := "rltest_" + strings.ReplaceAll(c.name, " ", "_") + "_"
			env["CACHE_KEY_PREFIX"] = prefix
			env["RUNTIME_ROOT"] = runtimeDir(t, map[string]string{"gw.yaml": hourRule(2)})
			env["RUNTIME_SUBDIRECTORY"] = "ratelimit"
			p := startEnv(t, env)
			if n := overAfter(t, dial(t, p.grpc), 5); n != 2 {
				t.Fatalf("%d calls admitted, want 2: the rules or the Redis store not in force; log: %s", n, p.stderr.String())
			}
			opts := c.opts
			opts.Addr = srv.Addr()
			rc := redis.NewClient(&opts)
			defer rc.Close()
			keys, err := rc.Keys(context.Background(), prefix+"*").Result()
			if err != nil || len(keys) != 1 {
				t.Fatalf("counters under %s: %v %v, want one", prefix, keys, err)
			}
		})
	}
}

// TestRatelimitEnvRedisTLS runs limiterd against redis-server's TLS port
// with a client certificate (REDIS_TLS and its files), and checks
// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION.
func TestRatelimitEnvRedisTLS(t *testing.T) {
	dir := t.TempDir()
	ca, clientCA := newCA(t, "redis ca"), newCA(t, "redis client ca")
	serverCert, serverKey := writePair(t, dir, "redis", ca.issue(t, false, "redis.test"))
	clientCert, clientKey := writePair(t, dir, "client", clientCA.issue(t, true, "limiterd"))
	caFile := writeFile(t, dir, "ca.pem", string(ca.pem))
	clientCAFile := writeFile(t, dir, "client-ca.pem", string(clientCA.pem))
	tlsPort := redistest.FreePort(t)
	redistest.StartServer(t, "--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", serverCert, "--tls-key-file", serverKey,
		"--tls-ca-cert-file", clientCAFile, "--tls-auth-clients", "yes")
	env := func(host string, skip bool) map[string]string {
		return map[string]string{
			"REDIS_SOCKET_TYPE":                    "tcp",
			"REDIS_URL":                            net.JoinHostPort(host, strconv.Itoa(tlsPort)),
			"REDIS_TLS":                            "true",
			"REDIS_TLS_CACERT":                     caFile,
			"REDIS_TLS_CLIENT_CERT":                clientCert,
			"REDIS_TLS_CLIENT_KEY":                 clientKey,
			"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": strconv.FormatBool(skip),
			"RUNTIME_ROOT":                         runtimeDir(t, map[string]string{"gw.yaml": hourRule(2)}),
			"RUNTIME_SUBDIRECTORY":                 "ratelimit",
		}
	}
	t.Run("verified", func(t *testing.T) {
		p := startEnv(t, env("127.0.0.1", false))
		if n := overAfter(t, dial(t, p.grpc), 5); n != 2 {
			t.Fatalf("%d calls admitted, want 2; log: %s", n, p.stderr.String())
		}
	})
	// "localhost" is not a name of the server's certificate: refused
	// (every call fails open) unless the name is not checked.
	t.Run("wrong name", func(t *testing.T) {
		p := startEnv(t, env("localhost", false))
		if n := overAfter(t, dial(t, p.grpc), 5); n != 6 {
			t.Fatalf("%d calls admitted, want all 6 failed open", n)
		}
	})
	t.Run("name not checked", func(t *testing.T) {
		p := startEnv(t, env("localhost", true))
		if n := overAfter(t, dial(t, p.grpc), 5); n != 2 {
			t.Fatalf("%d calls admitted, want 2; log: %s", n, p.stderr.String())
		}
	})
}

// TestRatelimitEnvSentinel runs limiterd with REDIS_TYPE=SENTINEL against
// a master watched by a real Sentinel (redis-server --sentinel).
func TestRatelimitEnvSentinel(t *testing.T) {
	master := redistest.StartServer(t)
	sentinel := redistest.StartSentinel(t, master, "mymaster")
	p := startEnv(t, map[string]string{
		"REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster," + sentinel, "CACHE_KEY_PREFIX": "sentinel_",
		"RUNTIME_ROOT": runtimeDir(t, map[string]string{"gw.yaml": hourRule(2)}), "RUNTIME_SUBDIRECTORY": "ratelimit",
	})
	if n := overAfter(t, dial(t, p.grpc), 5); n != 2 {
		t.Fatalf("%d calls admitted, want 2; log: %s", n, p.stderr.String())
	}
	keys, err := master.Client(t).Keys(context.Background(), "sentinel_*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("counters on the master: %v %v, want one", keys, err)
	}
}

// TestGRPCUDS checks GRPC_UDS on both servers: a stale socket file is
// replaced, gRPC health answers on the socket as on the port, and the
// file is gone after the stop.
func TestGRPCUDS(t *testing.T) {
	for _, server := range []string{GRPCServerLean, GRPCServerGo} {
		t.Run(server, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "rl.sock")
			stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			stale.SetUnlinkOnClose(false)
			stale.Close()
			srv := redistest.StartServer(t)
			p := startEnv(t, map[string]string{"GRPC_UDS": path, "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": srv.Addr()}, "--grpc-server", server)
			cc, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			r, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
			if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("health on the socket: %v %v", r, err)
			}
			if code := p.stop(); code != 0 {
				t.Fatalf("exit %d: %s", code, p.stderr.String())
			}
			if _, err := os.Lstat(path); !os.IsNotExist(err) {
				t.Fatalf("socket file after the stop: %v", err)
			}
		})
	}
}

// TestGRPCUDSInUse checks that a socket another process answers on is
// refused, not taken over.
func TestGRPCUDSInUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rl.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := DefaultConfig()
	cfg.HTTPAddr, cfg.GRPCAddr, cfg.MetricsAddr, cfg.GRPCUDS = "127.0.0.1:0", "127.0.0.1:0", "", path
	err = Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("Run: %v, want the socket in use", err)
	}
}

// TestGRPCMaxConnectionAge checks that both gRPC servers end a connection
// that reached its age with GOAWAY NO_ERROR "max_age", not before the age
// less its tenth of jitter.
func TestGRPCMaxConnectionAge(t *testing.T) {
	const age = 400 * time.Millisecond
	for _, server := range []string{GRPCServerLean, GRPCServerGo} {
		t.Run(server, func(t *testing.T) {
			p := start(t, "", "--grpc-server", server, "--grpc-max-connection-age", age.String(), "--grpc-max-connection-age-grace", "1s")
			nc, err := net.Dial("tcp", p.grpc)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			began := time.Now()
			if _, err := nc.Write([]byte(http2.ClientPreface)); err != nil {
				t.Fatal(err)
			}
			fr := http2.NewFramer(nc, nc)
			if err := fr.WriteSettings(); err != nil {
				t.Fatal(err)
			}
			_ = nc.SetReadDeadline(time.Now().Add(20 * time.Second))
			for {
				f, err := fr.ReadFrame()
				if err != nil {
					t.Fatalf("no GOAWAY: %v", err)
				}
				switch f := f.(type) {
				case *http2.SettingsFrame:
					if !f.IsAck() {
						_ = fr.WriteSettingsAck()
					}
				case *http2.PingFrame:
					if !f.IsAck() {
						_ = fr.WritePing(true, f.Data)
					}
				case *http2.GoAwayFrame:
					took := time.Since(began)
					if f.ErrCode != http2.ErrCodeNo || string(f.DebugData()) != "max_age" || took < age*9/10 {
						t.Fatalf("GOAWAY %v %q after %v, want NO_ERROR max_age after at least %v", f.ErrCode, f.DebugData(), took, age*9/10)
					}
					return
				}
			}
		})
	}
}

// TestRuntimeFiles checks the rule files read from envoyproxy/ratelimit's
// layout, as its goruntime loader reads them.
func TestRuntimeFiles(t *testing.T) {
	root := t.TempDir()
	mk := func(rel, body string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Dir(p), filepath.Base(p), body)
	}
	mk("rl/config/a.yaml", "a")
	mk("rl/config/no-extension", "b")
	mk("rl/config/sub/c.yml", "c")
	mk("rl/config/.hidden.yaml", "d")
	mk("rl/config/.dir/e.yaml", "e")
	mk("rl/config.top.yaml", "f") // its key, config.top.yaml, starts with "config."
	mk("rl/other/g.yaml", "g")
	if err := os.Symlink("sub", filepath.Join(root, "rl/config/link-to-dir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.yaml", filepath.Join(root, "rl/config/link-to-file")); err != nil {
		t.Fatal(err)
	}
	names := func(r RuntimeRules) string {
		files, err := r.files()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range files {
			rel, _ := filepath.Rel(root, f.Name)
			out = append(out, rel+"="+string(f.Content))
		}
		return strings.Join(out, " ")
	}
	cases := []struct {
		r    RuntimeRules
		want string
	}{
		{RuntimeRules{Root: root, Subdirectory: "rl", AppDirectory: "config", WatchRoot: true},
			"rl/config/.dir/e.yaml=e rl/config/.hidden.yaml=d rl/config/a.yaml=a rl/config/link-to-file=a rl/config/no-extension=b rl/config/sub/c.yml=c rl/config.top.yaml=f"},
		{RuntimeRules{Root: root, Subdirectory: "rl", AppDirectory: "config", WatchRoot: true, IgnoreDotFiles: true},
			"rl/config/a.yaml=a rl/config/link-to-file=a rl/config/no-extension=b rl/config/sub/c.yml=c rl/config.top.yaml=f"},
		{RuntimeRules{Root: root, Subdirectory: "rl", AppDirectory: "config", IgnoreDotFiles: true},
			"rl/config/a.yaml=a rl/config/link-to-file=a rl/config/no-extension=b rl/config/sub/c.yml=c"},
		{RuntimeRules{Root: filepath.Join(root, "rl"), AppDirectory: "other"}, "rl/other/g.yaml=g"},
	}
	for _, c := range cases {
		if got := names(c.r); got != c.want {
			t.Errorf("%+v:\n got %s\nwant %s", c.r, got, c.want)
		}
	}
}

// configMapVolume lays out dir as a Kubernetes ConfigMap volume does: the
// files in a timestamped directory, ..data a link to it, and a link for
// each file through ..data. Called again, it swaps ..data atomically.
func configMapVolume(t *testing.T, dir, version string, files map[string]string) {
	t.Helper()
	ts := filepath.Join(dir, "..v"+version)
	if err := os.MkdirAll(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		writeFile(t, ts, name, body)
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink("..v"+version, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// limitNow is the limit in force for remote_address, by a call's answer.
func limitNow(t *testing.T, cc *grpc.ClientConn) uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, envoyReq("remote_address", uuid.NewString()))
	if err != nil {
		t.Fatal(err)
	}
	return r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
}

// TestRatelimitEnvRuntimeReload checks the two ways envoyproxy/ratelimit's
// rules change: RUNTIME_ROOT's symlink swapped (RUNTIME_WATCH_ROOT=true,
// its default), and a ConfigMap volume's ..data swapped inside the
// application directory (RUNTIME_WATCH_ROOT=false with
// RUNTIME_IGNOREDOTFILES=true). Without RUNTIME_IGNOREDOTFILES the volume's
// timestamped directory is read too, and its domain twice: refused, as
// envoyproxy/ratelimit refuses it.
func TestRatelimitEnvRuntimeReload(t *testing.T) {
	srv := redistest.StartServer(t)
	redisEnv := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": srv.Addr()}
	with := func(m map[string]string) map[string]string {
		for k, v := range redisEnv {
			m[k] = v
		}
		return m
	}
	waitLimit := func(p *proc, cc *grpc.ClientConn, want uint32) {
		t.Helper()
		waitUntil(t, p, fmt.Sprintf("limit %d", want), func() bool { return limitNow(t, cc) == want })
	}

	t.Run("root symlink", func(t *testing.T) {
		base := t.TempDir()
		for v, n := range map[string]int{"v1": 3, "v2": 7} {
			dir := filepath.Join(base, v, "ratelimit", "config")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, dir, "gw.yaml", hourRule(n))
		}
		current := filepath.Join(base, "current")
		if err := os.Symlink("v1", current); err != nil {
			t.Fatal(err)
		}
		p := startEnv(t, with(map[string]string{"RUNTIME_ROOT": current, "RUNTIME_SUBDIRECTORY": "ratelimit"}), "--rules-interval", "50ms")
		cc := dial(t, p.grpc)
		waitLimit(p, cc, 3)
		if err := os.Symlink("v2", current+".new"); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(current+".new", current); err != nil {
			t.Fatal(err)
		}
		waitLimit(p, cc, 7)
	})

	t.Run("ConfigMap volume", func(t *testing.T) {
		root := t.TempDir()
		dir := filepath.Join(root, "ratelimit", "config")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		configMapVolume(t, dir, "1", map[string]string{"gw.yaml": hourRule(3)})
		env := map[string]string{"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false", "RUNTIME_IGNOREDOTFILES": "true"}
		p := startEnv(t, with(env), "--rules-interval", "50ms")
		cc := dial(t, p.grpc)
		waitLimit(p, cc, 3)
		configMapVolume(t, dir, "2", map[string]string{"gw.yaml": hourRule(9)})
		waitLimit(p, cc, 9)
		p.stop()

		env["RUNTIME_IGNOREDOTFILES"] = "false"
		full := with(env)
		full["USE_STATSD"], full["PORT"], full["GRPC_PORT"] = "false", "0", "0"
		cfg, err := parseFlags([]string{"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"}, &syncBuffer{}, envOf(full))
		if err != nil {
			t.Fatal(err)
		}
		err = Run(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), "..v2") {
			t.Fatalf("Run with the dot directories read: %v, want the duplicate domain refused", err)
		}
	})
}

// TestRatelimitEnvRedisCluster runs limiterd with REDIS_TYPE=CLUSTER
// against a three-node Redis Cluster.
func TestRatelimitEnvRedisCluster(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
	p := startEnv(t, map[string]string{
		"REDIS_TYPE": "CLUSTER", "REDIS_URL": strings.Join(addrs, ","), "REDIS_POOL_SIZE": "2",
		"RUNTIME_ROOT": runtimeDir(t, map[string]string{"gw.yaml": hourRule(2)}), "RUNTIME_SUBDIRECTORY": "ratelimit",
	})
	if n := overAfter(t, dial(t, p.grpc), 5); n != 2 {
		t.Fatalf("%d calls admitted, want 2; log: %s", n, p.stderr.String())
	}
}

// TestRatelimitEnvPrometheus checks USE_PROMETHEUS with PROMETHEUS_ADDR
// and PROMETHEUS_PATH: the metrics on that path only, and none without
// USE_PROMETHEUS.
func TestRatelimitEnvPrometheus(t *testing.T) {
	srv := redistest.StartServer(t)
	env := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": srv.Addr(), "USE_PROMETHEUS": "true",
		"PROMETHEUS_ADDR": "127.0.0.1:0", "PROMETHEUS_PATH": "/stats/prometheus"}
	p := startEnv(t, env)
	if p.metrics == "" {
		t.Fatalf("no metrics listener: %s", p.stderr.String())
	}
	if code, body := p.get("http://" + p.metrics + "/stats/prometheus"); code != 200 || !strings.Contains(body, "limiterd_rule_files") {
		t.Fatalf("/stats/prometheus: %d", code)
	}
	if code, _ := p.get("http://" + p.metrics + "/metrics"); code != 404 {
		t.Fatalf("/metrics: %d, want 404", code)
	}
	delete(env, "USE_PROMETHEUS")
	if p := startEnv(t, env); p.metrics != "" {
		t.Fatalf("metrics at %s without USE_PROMETHEUS", p.metrics)
	}
}
