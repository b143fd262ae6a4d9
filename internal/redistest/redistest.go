// Package redistest starts and reaches the Redis servers integration tests
// need: the shared server of the test run, and servers and three-node
// clusters that a test starts for itself on free loopback ports, empty and
// writing nothing outside a temporary directory.
//
// Under CI=true a server that cannot be reached or started fails the test;
// elsewhere it skips it.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Unavailable ends a test that cannot have its Redis: a failure under
// CI=true, a skip elsewhere.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: Redis integration tests must run)", msg)
	}
	t.Skipf("%s; set BATCHER_REDIS_ADDR or run scripts/test", msg)
}

// Addr is the shared server: BATCHER_REDIS_ADDR, or 127.0.0.1:6379.
func Addr() string {
	if a := os.Getenv("BATCHER_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// Shared returns a client of the shared server, closed at cleanup, after
// checking that it answers PING.
func Shared(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: Addr(), DialTimeout: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		Unavailable(t, "redis at %s does not answer PING: %v", Addr(), err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ServerBin is redis-server: BATCHER_REDIS_SERVER or the PATH.
func ServerBin(t testing.TB) string {
	t.Helper()
	if b := os.Getenv("BATCHER_REDIS_SERVER"); b != "" {
		return b
	}
	b, err := exec.LookPath("redis-server")
	if err != nil {
		Unavailable(t, "no redis-server executable: %v", err)
	}
	return b
}

// FreePort returns a loopback TCP port nothing listens on now.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Server is a redis-server process a test started.
type Server struct {
	Port  int
	bin   string
	dir   string
	extra []string
	cmd   *exec.Cmd
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// Kill stops the server at once, as a crash would; it is idempotent.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Freeze stops the server's process with SIGSTOP, as a hung server: its
// connections stay open and the kernel still accepts new ones, but nothing
// is read or answered until Thaw. A frozen server is still killed at
// cleanup.
func (s *Server) Freeze(t testing.TB) { s.signal(t, syscall.SIGSTOP) }

// Thaw resumes a frozen server with SIGCONT.
func (s *Server) Thaw(t testing.TB) { s.signal(t, syscall.SIGCONT) }

func (s *Server) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if s.cmd == nil || s.cmd.Process == nil {
		t.Fatalf("redis-server on port %d is not running", s.Port)
	}
	if err := syscall.Kill(s.cmd.Process.Pid, sig); err != nil {
		t.Fatalf("signal %v to redis-server on port %d: %v", sig, s.Port, err)
	}
}

// StartServer starts an empty, non-persistent redis-server on a free port
// with extra arguments, waits until it answers PING, and kills it at
// cleanup.
func StartServer(t testing.TB, extra ...string) *Server {
	t.Helper()
	s := &Server{bin: ServerBin(t), dir: t.TempDir(), extra: extra}
	for attempt := 0; ; attempt++ {
		s.Port = FreePort(t)
		if s.run(t) {
			t.Cleanup(s.Kill)
			return s
		}
		if attempt == 2 { // the port may have been taken between FreePort and the start
			t.Fatalf("redis-server on port %d did not answer PING within 10 s", s.Port)
		}
	}
}

// Restart kills the server and starts it again on the same port, empty.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	if !s.run(t) {
		t.Fatalf("redis-server on port %d did not answer PING within 10 s of a restart", s.Port)
	}
}

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

// run starts the process on s.Port and reports whether it answered PING;
// when it did not, the process is killed.
func (s *Server) run(t testing.TB) bool {
	t.Helper()
	args := append([]string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", s.dir}, s.extra...)
	s.cmd = exec.Command(s.bin, args...)
	if err := s.cmd.Start(); err != nil {
		Unavailable(t, "starting %s: %v", s.bin, err)
	}
	if waitPing(s.Addr(), 10*time.Second) {
		return true
	}
	s.Kill()
	return false
}

// waitPing waits until the server at addr answers PING; an error reply (a
// server with requirepass answers NOAUTH) counts as an answer.
func waitPing(addr string, within time.Duration) bool {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(within)
	for {
		err := c.Ping(context.Background()).Err()
		var reply redis.Error
		if err == nil || errors.As(err, &reply) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// StartCluster starts a Redis Cluster of n masters (no replicas), each its
// own redis-server with --cluster-enabled yes in its own temporary
// directory, joins them with redis-cli --cluster create, and waits until
// every slot is served. It returns the nodes' addresses.
func StartCluster(t testing.TB, n int) []string {
	t.Helper()
	nodes := StartClusterNodes(t, n)
	addrs := make([]string, n)
	for i, s := range nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// StartClusterNodes is StartCluster returning the nodes' servers, for
// tests that stop or freeze them.
func StartClusterNodes(t testing.TB, n int) []*Server {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		Unavailable(t, "no redis-cli executable: %v", err)
	}
	nodes := make([]*Server, n)
	addrs := make([]string, n)
	for i := range addrs {
		dir := t.TempDir()
		nodes[i] = StartServer(t, "--cluster-enabled", "yes", "--cluster-config-file", dir+"/nodes.conf",
			"--cluster-node-timeout", "5000")
		addrs[i] = nodes[i].Addr()
	}
	args := append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	// Every node must see every slot served before a client can rely on
	// any of them.
	deadline := time.Now().Add(20 * time.Second)
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		for {
			info, err := c.ClusterInfo(context.Background()).Result()
			if err == nil && containsLine(info, "cluster_state:ok") && containsLine(info, "cluster_slots_ok:16384") {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				t.Fatalf("cluster node %s not ready within 20 s: %q %v", addr, info, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Close()
	}
	return nodes
}

func containsLine(s, line string) bool {
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\n' {
			i++
		}
		l := s[:i]
		if len(l) > 0 && l[len(l)-1] == '\r' {
			l = l[:len(l)-1]
		}
		if l == line {
			return true
		}
		if i == len(s) {
			break
		}
		s = s[i+1:]
	}
	return false
}

// AwayFromWindowEdge waits, when the next multiple of window since the Unix
// epoch is less than margin away, until it has passed, so that a test of
// fixed windows aligned to window runs inside one window.
func AwayFromWindowEdge(window, margin time.Duration) {
	now := time.Now()
	left := window - time.Duration(now.UnixNano()%int64(window))
	if left < margin {
		time.Sleep(left + 10*time.Millisecond)
	}
}

// StartSentinel starts a Sentinel (redis-server --sentinel) on a free port
// that monitors master under name with a quorum of 1, with extra lines of
// sentinel.conf (such as "sentinel down-after-milliseconds <name> 1000"),
// waits until it names the master, kills it at cleanup, and returns its
// host:port.
func StartSentinel(t testing.TB, master *Server, name string, extra ...string) string {
	t.Helper()
	dir := t.TempDir()
	port := FreePort(t)
	conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s 127.0.0.1 %d 1\n", port, dir, name, master.Port)
	for _, l := range extra {
		conf += l + "\n"
	}
	path := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(ServerBin(t), path, "--sentinel")
	if err := cmd.Start(); err != nil {
		Unavailable(t, "starting redis-server --sentinel: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer sc.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if a, err := sc.GetMasterAddrByName(context.Background(), name).Result(); err == nil && len(a) == 2 {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Sentinel on port %d does not name master %s within 10 s", port, name)
		}
	}
}
