// Package redistest starts redis-server processes that a test owns, so the
// middleware's tests can stop the store in the middle of a test and see
// how requests fare.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Unavailable ends a test that cannot start or reach Redis: under CI=true
// the integration tests are required, so it fails; elsewhere it skips.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: Redis integration tests must run; see scripts/lib/svc-redis.sh)", msg)
	}
	t.Skipf("%s; set BATCHER_REDIS_SERVER or run scripts/test", msg)
}

// Server is a redis-server process a test started; it is killed at the
// test's cleanup.
type Server struct {
	bin  string
	port int
	dir  string
	cmd  *exec.Cmd
}

// Start starts an empty, non-persistent redis-server on a free loopback
// port (the executable is BATCHER_REDIS_SERVER, or redis-server on the
// PATH) and waits until it answers PING.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := os.Getenv("BATCHER_REDIS_SERVER")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			Unavailable(t, "no redis-server executable: %v", err)
		}
	}
	s := &Server{bin: bin, port: freePort(t), dir: t.TempDir()}
	s.start(t)
	t.Cleanup(s.Stop)
	return s
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Client returns a client of the server that does not retry, so that a
// stopped server shows as an error at once, and that honours context
// deadlines (ContextTimeoutEnabled), so a store timeout bounds a call to a
// server that does not answer; it is closed at cleanup.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), DialTimeout: 200 * time.Millisecond, MaxRetries: -1,
		ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

func (s *Server) start(t testing.TB) {
	t.Helper()
	s.cmd = exec.Command(s.bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", s.dir)
	if err := s.cmd.Start(); err != nil {
		Unavailable(t, "starting %s: %v", s.bin, err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			s.Stop()
			Unavailable(t, "redis-server on port %d did not answer PING within 10 s", s.port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Restart starts the server again on the same port, empty.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	s.start(t)
}

// Stop kills the server at once, as a crash would; it is idempotent.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
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
