// Package fdtest runs a server in a child process that has few file
// descriptors, and exhausts them from the test, so that a test can check
// that the server survives "too many open files" on Accept.
//
// The child is the test binary itself: the package's TestMain calls
// Child first, which, in the child, lowers RLIMIT_NOFILE, runs the
// server the test named, prints its address on standard output and exits
// when its standard input closes.
package fdtest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// envChild names the server the child runs.
const envChild = "BATCHER_FDTEST_CHILD"

// Limit is the child's RLIMIT_NOFILE: the runtime and the listener take
// about ten, leaving a few for connections.
const Limit = 24

// Child runs, in a child process, the server serve makes for the name the
// test gave Start, and exits; in the test process it returns at once.
// serve listens on ln, logs accept errors to os.Stderr, and returns only
// when the server fails.
func Child(servers map[string]func(ln net.Listener) error) {
	name := os.Getenv(envChild)
	if name == "" {
		return
	}
	lim := syscall.Rlimit{Cur: Limit, Max: Limit}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Fprintln(os.Stderr, "fdtest: setrlimit:", err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fdtest: listen:", err)
		os.Exit(2)
	}
	fmt.Println(ln.Addr())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	err = servers[name](ln)
	fmt.Fprintln(os.Stderr, "fdtest: the server returned:", err)
	os.Exit(3)
}

// Proc is a child process serving.
type Proc struct {
	Addr   string
	stderr *buffer
	exited chan struct{}
	state  *os.ProcessState
}

// buffer is a bytes.Buffer safe for a writer and readers.
type buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Start runs the server name in a child process and waits for its
// address; the child ends at cleanup.
func Start(t *testing.T, name string) *Proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+name)
	p := &Proc{stderr: &buffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.exited)
	}()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("the child printed no address (%v): %s", err, p.stderr.String())
	}
	p.Addr = strings.TrimSpace(line)
	return p
}

// waitExit waits a little for the child to exit, so that its state and
// last words can be reported.
func (p *Proc) waitExit() {
	select {
	case <-p.exited:
	case <-time.After(2 * time.Second):
	}
}

// Stderr is what the child wrote to its standard error so far.
func (p *Proc) Stderr() string { return p.stderr.String() }

// Alive fails the test if the child has exited.
func (p *Proc) Alive(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		t.Fatalf("the server's process exited (%v): %s", p.state, p.stderr.String())
	default:
	}
}

// Exhaust opens connections to the child until its Accept fails with
// "too many open files" (its log says so), within 20 s, and returns them
// for the test to close.
func (p *Proc) Exhaust(t *testing.T) []net.Conn {
	t.Helper()
	var conns []net.Conn
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(p.Stderr(), "too many open files") {
		select {
		case <-p.exited:
			for _, c := range conns {
				c.Close()
			}
			t.Fatalf("the server's process exited (%v): %s", p.state, p.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no accept error after %d connections: %s", len(conns), p.Stderr())
		}
		if len(conns) < 4*Limit {
			nc, err := net.Dial("tcp", p.Addr)
			if err != nil {
				p.waitExit()
				t.Fatalf("dial: %v; the server's process: %v: %s", err, p.state, p.stderr.String())
			}
			conns = append(conns, nc)
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return conns
}
