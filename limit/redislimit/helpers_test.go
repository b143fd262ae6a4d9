package redislimit_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// unavailable ends a test that cannot reach its Redis: a failure under
// CI=true, where scripts/test starts Redis, a skip otherwise.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: Redis integration tests must run; see scripts/lib/svc-redis.sh)", msg)
	}
	t.Skipf("%s; set BATCHER_REDIS_ADDR or run scripts/test", msg)
}

// redisAddr is the shared test server: BATCHER_REDIS_ADDR or the local default.
func redisAddr() string {
	if addr := os.Getenv("BATCHER_REDIS_ADDR"); addr != "" {
		return addr
	}
	return "127.0.0.1:6379"
}

// connect returns a client of addr that answered PING; it is closed at cleanup.
func connect(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, PoolSize: 80})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		unavailable(t, "redis at %s does not answer PING: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// testPrefix returns a key prefix of its own and deletes its keys at cleanup.
func testPrefix(t testing.TB, c redis.UniversalClient) string {
	t.Helper()
	prefix := "limittest-" + uuid.NewString()[:8] + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		del := func(ctx context.Context, c *redis.Client) error {
			iter := c.Scan(ctx, 0, prefix+"*", 200).Iterator()
			for iter.Next(ctx) {
				c.Del(ctx, iter.Val())
			}
			return iter.Err()
		}
		if cc, ok := c.(*redis.ClusterClient); ok {
			_ = cc.ForEachMaster(ctx, del)
		} else if sc, ok := c.(*redis.Client); ok {
			_ = del(ctx, sc)
		}
	})
	return prefix
}

// redisServerBin returns the redis-server executable.
func redisServerBin(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("BATCHER_REDIS_SERVER"); bin != "" {
		return bin
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, "no redis-server executable: %v", err)
	}
	return bin
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// server is a redis-server process a test started; it is killed at cleanup.
type server struct {
	addr string
	cmd  *exec.Cmd
}

// startServer starts an empty, non-persistent redis-server with extra
// arguments in a temporary directory and waits until it answers PING.
func startServer(t testing.TB, extra ...string) *server {
	t.Helper()
	port := freePort(t)
	s := &server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--daemonize", "no", "--dir", t.TempDir()}, extra...)
	s.cmd = exec.Command(redisServerBin(t), args...)
	if err := s.cmd.Start(); err != nil {
		unavailable(t, "starting redis-server: %v", err)
	}
	t.Cleanup(s.kill)
	c := redis.NewClient(&redis.Options{Addr: s.addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer PING within 10 s", s.addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
}

// kill stops the server at once, as a crash would; it is idempotent.
func (s *server) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// startCluster starts three redis-server processes in cluster mode, joins
// them with redis-cli --cluster create (three masters, no replicas) and
// returns their addresses once every node reports cluster_state:ok.
func startCluster(t testing.TB) []string {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		unavailable(t, "no redis-cli executable: %v", err)
	}
	var addrs []string
	for i := 0; i < 3; i++ {
		dir := t.TempDir()
		s := startServer(t, "--cluster-enabled", "yes", "--cluster-config-file",
			filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "2000")
		addrs = append(addrs, s.addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		for {
			info, _ := c.ClusterInfo(context.Background()).Result()
			if strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				t.Fatalf("cluster node %s not ok within 20 s: %s", addr, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Close()
	}
	return addrs
}
