package service

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
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
			"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": net.JoinHostPort(host, strconv.Itoa(tlsPort)),
			"REDIS_TLS": "true", "REDIS_TLS_CACERT": caFile, "REDIS_TLS_CLIENT_CERT": clientCert, "REDIS_TLS_CLIENT_KEY": clientKey,
			"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": strconv.FormatBool(skip),
			"RUNTIME_ROOT": runtimeDir(t, map[string]string{"gw.yaml": hourRule(2)}), "RUNTIME_SUBDIRECTORY": "ratelimit",
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
	sentinelPort := redistest.FreePort(t)
	conf := writeFile(t, t.TempDir(), "sentinel.conf", fmt.Sprintf(
		"port %d\nbind 127.0.0.1\nsentinel monitor mymaster 127.0.0.1 %d 1\n", sentinelPort, master.Port))
	cmd := exec.Command(redistest.ServerBin(t), conf, "--sentinel")
	if err := cmd.Start(); err != nil {
		redistest.Unavailable(t, "starting redis-server --sentinel: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := redis.NewSentinelClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", sentinelPort)})
	defer sc.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if addr, err := sc.GetMasterAddrByName(context.Background(), "mymaster").Result(); err == nil && len(addr) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Sentinel does not name the master within 10 s")
		}
	}
	p := startEnv(t, map[string]string{
		"REDIS_TYPE": "SENTINEL", "REDIS_URL": fmt.Sprintf("mymaster,127.0.0.1:%d", sentinelPort), "CACHE_KEY_PREFIX": "sentinel_",
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
