package redislease_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// unavailable ends a test that cannot reach a Redis server: under CI the
// integration tests are required, so it fails; elsewhere it skips.
func unavailable(t testing.TB, format string, args ...interface{}) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: Redis integration tests must run; see scripts/lib/svc-redis.sh)", msg)
	}
	t.Skipf("%s; set BATCHER_REDIS_ADDR or run scripts/test", msg)
}

// redisAddr is the server the integration tests use: BATCHER_REDIS_ADDR, or
// the conventional local port.
func redisAddr() string {
	if addr := os.Getenv("BATCHER_REDIS_ADDR"); addr != "" {
		return addr
	}
	return "127.0.0.1:6379"
}

// connect returns a client of addr after checking that it answers PING, or
// ends the test through unavailable. The client is closed at cleanup.
func connect(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, MaxRetries: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		unavailable(t, "redis at %s does not answer PING: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// sharedClient connects to the shared test server.
func sharedClient(t testing.TB) *redis.Client {
	t.Helper()
	return connect(t, redisAddr())
}

// testPrefix returns a key prefix no other test uses and deletes every key
// under it when the test ends, leaving other users' keys alone.
func testPrefix(t testing.TB, c redis.UniversalClient) string {
	t.Helper()
	prefix := "redislease-test-" + uuid.NewString()
	t.Cleanup(func() { deleteKeys(c, prefix) })
	return prefix
}

// deleteKeys deletes the keys of the resource with prefix, as a store that
// lost its data would.
func deleteKeys(c redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, "{"+prefix+"}:*", 100).Iterator()
	for iter.Next(ctx) {
		c.Del(ctx, iter.Val())
	}
}

// serverMillis reads the server's clock in milliseconds.
func serverMillis(t testing.TB, c redis.UniversalClient) int64 {
	t.Helper()
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return now.UnixMilli()
}

// redisServer is a redis-server process that a test started and owns.
type redisServer struct {
	bin  string
	port int
	dir  string // working directory: nothing it writes lands in the tree
	cmd  *exec.Cmd
}

// redisServerBin returns the redis-server executable, from
// BATCHER_REDIS_SERVER or the PATH, or ends the test through unavailable.
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

// freePort returns a TCP port on 127.0.0.1 that nothing listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startRedisServer starts an empty, non-persistent redis-server on a free
// port, with extra arguments, and stops it at cleanup.
func startRedisServer(t testing.TB, extra ...string) *redisServer {
	t.Helper()
	s := &redisServer{bin: redisServerBin(t), port: freePort(t), dir: t.TempDir()}
	s.start(t, extra...)
	t.Cleanup(s.kill)
	return s
}

func (s *redisServer) addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// start runs the server on its port, empty, and waits until it answers.
func (s *redisServer) start(t testing.TB, extra ...string) {
	t.Helper()
	args := append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", s.dir}, extra...)
	s.cmd = exec.Command(s.bin, args...)
	if err := s.cmd.Start(); err != nil {
		unavailable(t, "starting %s: %v", s.bin, err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr(), DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			s.kill()
			t.Fatalf("redis-server on port %d did not answer PING within 10 s", s.port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill stops the server at once, as a crash would; it is idempotent.
func (s *redisServer) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// eventually polls cond until it holds or timeout passes. The lease loop
// runs on its own goroutine against a real server, so polling with a
// deadline is the only way to observe it.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true within %v", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// errorsAsType reports whether err matches target's type; a small wrapper
// to keep assertions on one line.
func errorsAsType[T error](err error) (T, bool) {
	var target T
	ok := errors.As(err, &target)
	return target, ok
}
