package examples

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// limiterdBin is the limiterd command built from this checkout by TestMain.
var limiterdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "limiterd-examples-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	limiterdBin = filepath.Join(dir, "limiterd")
	// Built in the main module, with its go.sum: the binary that ships.
	build := exec.Command("go", "build", "-o", limiterdBin, "./cmd/limiterd")
	build.Dir = ".."
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "examples: building limiterd:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// limiterd is a limiterd process a test started.
type limiterd struct {
	http, grpc, metrics string
	stderr              *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// freeAddr is a loopback address with a port free at the time of the call.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startLimiterd runs the built limiterd with the configuration file config
// (limiterd's own loader reads it: a file it refuses stops it with exit
// status 2) and the rules of rulesDir, on free loopback ports, and waits
// until it serves. It is stopped at the test's cleanup.
func startLimiterd(t *testing.T, config, rulesDir string) *limiterd {
	t.Helper()
	l := &limiterd{http: freeAddr(t), grpc: freeAddr(t), metrics: freeAddr(t)}
	l.stderr = runLimiterd(t, nil, func(stderr string) bool { return strings.Contains(stderr, `"limiterd started"`) },
		"--config", config, "--rules", rulesDir,
		"--http-addr", l.http, "--grpc-addr", l.grpc, "--metrics-addr", l.metrics, "--log-format", "json")
	return l
}

// runLimiterd runs the built limiterd with args and, when env is not nil,
// that environment alone (and PATH), until the test's cleanup, which stops
// it as a pod's SIGTERM would. It returns once ready, given the standard
// error so far, reports true; it fails the test if limiterd exits first
// or is not ready within 30 s.
func runLimiterd(t *testing.T, env []string, ready func(stderr string) bool, args ...string) *lockedBuffer {
	t.Helper()
	stderr := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, limiterdBin, args...)
	if env != nil {
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	}
	cmd.Stderr = stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 15 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cancel()
		if err := <-exited; err != nil && ctx.Err() == nil {
			t.Errorf("limiterd: %v: %s", err, stderr.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !ready(stderr.String()) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("limiterd %v refused to start (%v): %s", args, err, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("limiterd %v not ready within 30 s: %s", args, stderr.String())
		}
	}
	return stderr
}

// checkLimiterdConfigFile starts limiterd with the file: limiterd's own
// loader is the strict check (unknown keys, wrong kinds and bad values
// stop it).
func checkLimiterdConfigFile(t *testing.T, file string) {
	startLimiterd(t, file, "rules")
}

// checkLimiterdConfig checks a configuration given as its content, such as
// a ConfigMap's.
func checkLimiterdConfig(t *testing.T, content string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "limiterd.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	startLimiterd(t, p, "rules")
}

// get fetches url and returns its status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
