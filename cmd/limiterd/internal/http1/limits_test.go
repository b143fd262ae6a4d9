package http1

import (
	"bufio"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestHandedOffSlowBodyTimesOut: a chunked body, which the fast path hands
// to net/http, that stops arriving no longer holds the connection:
// ReadTimeout reaches the net/http server too.
func TestHandedOffSlowBodyTimesOut(t *testing.T) {
	ts := newTestServer(t, func(s *Server) { s.ReadTimeout = 200 * time.Millisecond })
	c := ts.dial(t)
	c.send("POST /echo HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
	// The server answers (or not) and closes; a connection held open runs
	// into the client's own 10 s deadline instead.
	if _, err := io.ReadAll(c.br); err != nil {
		t.Fatalf("the connection stayed open: %v", err)
	}
}

// TestHandedOffHeaderLimit: a header past MaxHeaderBytes, handed off to
// net/http, is refused there with 431 at the same limit.
func TestHandedOffHeaderLimit(t *testing.T) {
	ts := newTestServer(t, func(s *Server) { s.MaxHeaderBytes = 1 << 10 })
	c := ts.dial(t)
	c.send(post("/echo", "x", "X-Junk: "+strings.Repeat("j", 8<<10)))
	if resp, _ := c.answer("POST"); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d, want 431", resp.StatusCode)
	}
}

// failingListener fails its first n Accepts with EMFILE, as a process out
// of file descriptors does.
type failingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.n.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestAcceptErrorsBackOff: Accept failing with "too many open files" does
// not stop the server; it waits and tries again, and logs at most once a
// second.
func TestAcceptErrorsBackOff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &failingListener{Listener: ln}
	fl.n.Store(8) // 5+10+...+640 ms of backoff: about 1.3 s
	logs := &syncWriter{}
	s := &Server{Handler: http.HandlerFunc(echo), Routes: []Route{{Method: "POST", Path: "/echo", Handler: http.HandlerFunc(echo)}}}
	s.ErrorLog = newLogger(logs)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- s.Serve(fl) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	rc := &rawConn{t: t, c: c, br: newReader(c)}
	rc.send(post("/echo", "x"))
	if _, b := rc.answer("POST"); b != "fast POST /echo host=test key= body=x" {
		t.Fatalf("answer %q", b)
	}
	elapsed := time.Since(start)
	lines := strings.Count(logs.String(), "accept error")
	if lines < 1 || float64(lines) > 1+elapsed.Seconds() {
		t.Fatalf("%d accept errors logged in %v: want at least one and at most one a second:\n%s", lines, elapsed, logs.String())
	}
}

func newLogger(w io.Writer) *log.Logger { return log.New(w, "", 0) }

func newReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }

// TestHeaderLimitExact: a head (request line, fields and the blank line)
// of exactly MaxHeaderBytes is served and one byte more is refused with
// 431, on the fast path and on a request handed off to net/http, whose own
// bound would let 4 KiB more in.
func TestHeaderLimitExact(t *testing.T) {
	const max = 2 << 10
	ts := newTestServer(t, func(s *Server) { s.MaxHeaderBytes = max })
	// head returns a request to path, by method, whose head is size bytes.
	head := func(method, path string, size int) string {
		base := method + " " + path + " HTTP/1.1\r\nHost: test\r\nContent-Length: 1\r\nX-Junk: \r\n\r\n"
		req := method + " " + path + " HTTP/1.1\r\nHost: test\r\nContent-Length: 1\r\nX-Junk: " +
			strings.Repeat("j", size-len(base)) + "\r\n\r\nx"
		return req
	}
	for _, c := range []struct {
		name, method, path string
	}{{"fast path", "POST", "/echo"}, {"net/http", "PUT", "/other"}} {
		for _, size := range []int{max, max + 1, max + 3000} {
			conn := ts.dial(t)
			conn.send(head(c.method, c.path, size))
			resp, _ := conn.answer(c.method)
			want := http.StatusOK
			if size > max {
				want = http.StatusRequestHeaderFieldsTooLarge
			}
			if resp.StatusCode != want {
				t.Errorf("%s, a head of %d bytes (limit %d): status %d, want %d", c.name, size, max, resp.StatusCode, want)
			}
			if size <= max {
				// Within the bound the connection is kept for the next request.
				conn.send(head(c.method, c.path, size))
				if resp, _ := conn.answer(c.method); resp.StatusCode != http.StatusOK {
					t.Errorf("%s, a second head of %d bytes on the connection: status %d, want 200", c.name, size, resp.StatusCode)
				}
				continue
			}
			// Past it, the answer says the connection ends, and it does.
			if !resp.Close {
				t.Errorf("%s, a head of %d bytes: the 431 does not close the connection (header %q)", c.name, size, resp.Header.Get("Connection"))
			}
			if !conn.ended() {
				t.Errorf("%s, a head of %d bytes: the connection is still open after the 431", c.name, size)
			}
		}
	}
}

// TestFastPathBodyUnderReadTimeout: on the fast path, as in net/http,
// ReadHeaderTimeout bounds the header alone and ReadTimeout the whole
// request: a body that trickles in for longer than the header's timeout,
// within the request's, is served (it was cut at the header's timeout).
func TestFastPathBodyUnderReadTimeout(t *testing.T) {
	ts := newTestServer(t, func(s *Server) {
		s.ReadHeaderTimeout = 150 * time.Millisecond
		s.ReadTimeout = 5 * time.Second
	})
	c := ts.dial(t)
	c.send("POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\r\n")
	for _, b := range "hello" {
		time.Sleep(100 * time.Millisecond) // 500 ms in all: past the header's 150 ms
		c.send(string(b))
	}
	if _, body := c.answer("POST"); body != "fast POST /echo host=test key= body=hello" {
		t.Fatalf("a slow body within ReadTimeout: %q", body)
	}
}

// TestFastPathReadTimeoutBoundsWholeRequest: a ReadTimeout shorter than
// ReadHeaderTimeout ends a request whose body is still coming once it has
// passed, counted from the request's first byte, whether the header
// arrived at once or slowly (net/http leaves the header its own timeout).
func TestFastPathReadTimeoutBoundsWholeRequest(t *testing.T) {
	ts := newTestServer(t, func(s *Server) {
		s.ReadHeaderTimeout = 5 * time.Second
		s.ReadTimeout = 300 * time.Millisecond
	})
	for _, slowHeader := range []bool{false, true} {
		c := ts.dial(t)
		start := time.Now()
		head := "POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 50\r\n\r\n"
		rest := head
		if slowHeader {
			c.send(head[:10])
			time.Sleep(400 * time.Millisecond) // past ReadTimeout, within ReadHeaderTimeout
			rest = head[10:]
		}
		c.send(rest)
		stop := make(chan struct{})
		go func() { // the body keeps coming, one byte every 50 ms, until the server ends it
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				if _, err := c.c.Write([]byte("x")); err != nil {
					return
				}
			}
		}()
		ended := c.ended()
		close(stop)
		if !ended {
			t.Fatalf("slow header %v: a body still coming past ReadTimeout kept the connection open", slowHeader)
		}
		if d := time.Since(start); d < 300*time.Millisecond || d > 5*time.Second {
			t.Fatalf("slow header %v: connection ended after %v, want after ReadTimeout (300 ms) and before 5 s", slowHeader, d)
		}
	}
}
