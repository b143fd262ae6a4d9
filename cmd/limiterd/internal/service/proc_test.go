package service

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go.uber.org/goleak"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests run limiterd in the test process through Main, as the
// command does. A test that needs a process of its own (one with fewer file
// descriptors) runs the test binary, which runs Main when
// LIMITERD_TEST_MAIN is set.
//
// LIMITERD_TEST_LOCAL_ALLOWANCE=true runs every test with
// backends.redis.local_allowance on by default, and with it
// LIMITERD_TEST_COLD_LEASE=<duration> gives the keyed stores cold leases
// of that length.
func TestMain(m *testing.M) {
	defaultLocalAllowance = os.Getenv("LIMITERD_TEST_LOCAL_ALLOWANCE") == "true"
	if v := os.Getenv("LIMITERD_TEST_COLD_LEASE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			fmt.Fprintln(os.Stderr, "LIMITERD_TEST_COLD_LEASE:", err)
			os.Exit(2)
		}
		testColdLease = d
	}
	if os.Getenv("LIMITERD_TEST_MAIN") == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := Main(ctx, os.Args[1:], os.Stderr)
		stop()
		os.Exit(code)
	}
	code := m.Run()
	removeBuilt()
	// Every limiterd a test starts has returned from Main by now: none of
	// its goroutines may be left.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// skipWithColdLeases skips t when LIMITERD_TEST_COLD_LEASE gives every
// keyed store cold leases, for a test whose premise they change, saying
// why; the runs without them cover it.
func skipWithColdLeases(t *testing.T, why string) {
	t.Helper()
	if testColdLease != 0 {
		t.Skip("with LIMITERD_TEST_COLD_LEASE: " + why)
	}
}

// proc is a limiterd a test started.
type proc struct {
	t                   *testing.T
	cancel              context.CancelFunc
	stderr              *syncBuffer
	http, grpc, metrics string
	exited              chan struct{}
	exitCode            int
}

// syncBuffer is a bytes.Buffer safe for a writer and readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runOnce runs limiterd with args to its end and returns its exit status
// and standard error.
func runOnce(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var stderr syncBuffer
	code := Main(ctx, args, &stderr)
	if ctx.Err() != nil {
		t.Fatalf("limiterd %v did not exit: %s", args, stderr.String())
	}
	return code, stderr.String()
}

// writeFile writes body to name in dir and returns its path.
func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// start runs limiterd on loopback ports the system picks, with config
// (none when empty) and extra flags, waits until it serves, reads its
// addresses from its start line, and stops it at cleanup.
func start(t *testing.T, config string, extra ...string) *proc {
	t.Helper()
	p := &proc{
		t:      t,
		stderr: &syncBuffer{},
		exited: make(chan struct{}),
	}
	args := []string{"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--log-format", "json"}
	if config != "" {
		args = append(args, "--config", writeFile(t, t.TempDir(), "limiterd.yaml", config))
	}
	// LIMITERD_TEST_GRPC_SERVER=grpc-go runs every test against grpc-go's
	// server instead of the default.
	if v := os.Getenv("LIMITERD_TEST_GRPC_SERVER"); v != "" {
		args = append(args, "--grpc-server", v)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go func() {
		p.exitCode = Main(ctx, append(args, extra...), p.stderr)
		close(p.exited)
	}()
	t.Cleanup(func() { p.stop() })
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(p.stderr.String(), "limiterd started") {
		select {
		case <-p.exited:
			t.Fatalf("limiterd exited with %d: %s", p.exitCode, p.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("limiterd did not start within 20 s: %s", p.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		if !strings.Contains(line, "limiterd started") {
			continue
		}
		var addrs struct{ HTTP, GRPC, Metrics string }
		if err := json.Unmarshal([]byte(line), &addrs); err != nil {
			t.Fatalf("start line %q: %v", line, err)
		}
		p.http, p.grpc, p.metrics = addrs.HTTP, addrs.GRPC, addrs.Metrics
		break
	}
	return p
}

// stop ends the service's context, as SIGTERM does, and waits for Main
// to return; it returns the exit status.
func (p *proc) stop() int {
	p.cancel()
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		p.t.Errorf("limiterd did not stop within 15 s: %s", p.stderr.String())
		<-p.exited
	}
	return p.exitCode
}

// post sends a POST to the REST server with headers (name, value pairs).
func (p *proc) post(path, body string, headers ...string) *http.Response {
	p.t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+p.http+path, strings.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func (p *proc) get(url string) (int, string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func body(t *testing.T, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
