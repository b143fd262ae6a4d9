package http1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// testServer serves the same handler on the fast path for POST /echo and
// through net/http for everything else, so that each answer says which
// path served it.
type testServer struct {
	srv  *Server
	addr string
	logs *syncWriter
	done chan error
}

// echo answers with the path that served it, the method, path, Host and
// X-Key of the request and its body.
func echo(w http.ResponseWriter, r *http.Request) {
	via := "net/http"
	if _, ok := w.(*response); ok {
		via = "fast"
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if r.Header.Get("X-Panic") != "" {
		panic("asked to")
	}
	if d := r.Header.Get("X-Sleep"); d != "" {
		t, _ := time.ParseDuration(d)
		time.Sleep(t)
	}
	w.Header().Set("X-Via", via)
	fmt.Fprintf(w, "%s %s %s host=%s key=%s body=%s", via, r.Method, r.URL.Path, r.Host, r.Header.Get("X-Key"), b)
}

func newTestServer(t *testing.T, configure func(*Server)) *testServer {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/", echo)
	mux.HandleFunc("POST /nocontent", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	logs := &syncWriter{}
	s := &Server{
		Handler: mux,
		Routes: []Route{
			{Method: "POST", Path: "/echo", Handler: http.HandlerFunc(echo)},
			{Method: "POST", Path: "/nocontent", Handler: mux},
			{Method: "POST", Path: "/sniff", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Bad", "a\r\nInjected: yes")
				_, _ = w.Write([]byte("<html><body>hi</body></html>"))
			})},
		},
		ReadHeaderTimeout: 5 * time.Second,
		MaxBodyBytes:      1 << 10,
		ErrorLog:          log.New(logs, "", 0),
	}
	if configure != nil {
		configure(s)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{srv: s, addr: ln.Addr().String(), logs: logs, done: make(chan error, 1)}
	go func() { ts.done <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-ts.done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return ts
}

// syncWriter is a log's output, safe to read while it is written.
type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// rawConn is a client connection that writes bytes and reads answers.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func (ts *testServer) dial(t *testing.T) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

func (r *rawConn) send(s string) {
	r.t.Helper()
	if _, err := io.WriteString(r.c, s); err != nil {
		r.t.Fatal(err)
	}
}

// answer reads one answer to a request with method and returns it with
// its body.
func (r *rawConn) answer(method string) (*http.Response, string) {
	r.t.Helper()
	resp, err := http.ReadResponse(r.br, &http.Request{Method: method})
	if err != nil {
		r.t.Fatalf("reading an answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatalf("reading a body: %v", err)
	}
	return resp, string(b)
}

// closed reports whether the server closed the connection.
func (r *rawConn) closed() bool {
	r.t.Helper()
	_, err := r.br.ReadByte()
	return err == io.EOF
}

// ended reports whether the server ended the connection: closed, or
// reset because what the client sent was left unread. A connection still
// open fails by the dial's deadline.
func (r *rawConn) ended() bool {
	r.t.Helper()
	_, err := r.br.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func post(path, body string, header ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: test\r\n", path)
	for _, h := range header {
		b.WriteString(h + "\r\n")
	}
	if body != "" {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	return b.String() + "\r\n" + body
}

func TestKeepAliveAndPipelining(t *testing.T) {
	ts := newTestServer(t, nil)
	c := ts.dial(t)
	for i := range 3 {
		c.send(post("/echo", fmt.Sprint("body", i), "X-Key: k"+fmt.Sprint(i)))
		resp, b := c.answer("POST")
		want := fmt.Sprintf("fast POST /echo host=test key=k%d body=body%d", i, i)
		if resp.StatusCode != 200 || b != want {
			t.Fatalf("request %d: %d %q, want 200 %q", i, resp.StatusCode, b, want)
		}
		if resp.Header.Get("Date") == "" || resp.ContentLength != int64(len(want)) || resp.Close {
			t.Fatalf("request %d: header %v, length %d, close %v", i, resp.Header, resp.ContentLength, resp.Close)
		}
	}
	// Pipelined: three at once, a stray CRLF after a POST body, one
	// split across writes.
	c.send(post("/echo", "a") + post("/echo", "b") + "\r\n" + post("/echo", "c")[:10])
	time.Sleep(10 * time.Millisecond)
	c.send(post("/echo", "c")[10:])
	for _, want := range []string{"a", "b", "c"} {
		if _, b := c.answer("POST"); b != "fast POST /echo host=test key= body="+want {
			t.Fatalf("pipelined: %q, want body %s", b, want)
		}
	}
}

func TestHandOff(t *testing.T) {
	ts := newTestServer(t, nil)
	big := strings.Repeat("x", 2<<10)
	cases := []struct {
		name, req, method string
		status            int
		want              string // prefix of the body
	}{
		{"other path", post("/other", "x"), "POST", 200, "net/http POST /other host=test key= body=x"},
		{"query", "POST /echo?a=b HTTP/1.1\r\nHost: test\r\n\r\n", "POST", 200, "net/http POST /echo"},
		{"GET", "GET /echo HTTP/1.1\r\nHost: test\r\n\r\n", "GET", 200, "net/http GET /echo"},
		{"HEAD", "HEAD /echo HTTP/1.1\r\nHost: test\r\n\r\n", "HEAD", 200, ""},
		{"chunked body", "POST /echo HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", "POST", 200, "net/http POST /echo host=test key= body=abcde"},
		{"body over the fast limit", post("/echo", big), "POST", 200, "net/http POST /echo host=test key= body=" + big},
		{"header over the fast limit", post("/echo", "x", "X-Key: "+strings.Repeat("k", 9<<10)), "POST", 200, "net/http POST /echo host=test key=" + strings.Repeat("k", 9<<10)},
		{"folded header", "POST /echo HTTP/1.1\r\nHost: test\r\nX-Key: a\r\n b\r\n\r\n", "POST", 200, "net/http POST /echo host=test key=a b body="},
		{"bad request line", "GARBAGE\r\n\r\n", "GET", 400, ""},
		{"no Host", "POST /echo HTTP/1.1\r\n\r\n", "POST", 400, ""},
		{"bad Content-Length", "POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: x\r\n\r\n", "POST", 400, ""},
		{"unsupported version", "POST /echo HTTP/2.5\r\nHost: test\r\n\r\n", "POST", 505, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := ts.dial(t)
			// A fast request first, whose answer must come before the
			// handed-off one's.
			c.send(post("/echo", "first") + tc.req)
			if _, b := c.answer("POST"); b != "fast POST /echo host=test key= body=first" {
				t.Fatalf("first answer %q", b)
			}
			resp, b := c.answer(tc.method)
			if resp.StatusCode != tc.status || !strings.HasPrefix(b, tc.want) {
				t.Fatalf("%d %.80q, want %d %.80q", resp.StatusCode, b, tc.status, tc.want)
			}
			if tc.status != 200 {
				return
			}
			// net/http keeps serving the connection.
			c.send(post("/echo", "after"))
			if _, b := c.answer("POST"); b != "net/http POST /echo host=test key= body=after" {
				t.Fatalf("after the hand-off: %q", b)
			}
		})
	}
}

func TestExpectContinue(t *testing.T) {
	ts := newTestServer(t, nil)
	c := ts.dial(t)
	c.send("POST /echo HTTP/1.1\r\nHost: test\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
	line, err := c.br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("got %q, %v; want 100 Continue", line, err)
	}
	if _, err := c.br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	c.send("ok")
	if _, b := c.answer("POST"); b != "net/http POST /echo host=test key= body=ok" {
		t.Fatalf("answer %q", b)
	}
}

func TestHTTP10(t *testing.T) {
	ts := newTestServer(t, nil)
	c := ts.dial(t)
	c.send("POST /echo HTTP/1.0\r\nContent-Length: 1\r\n\r\nx")
	resp, b := c.answer("POST")
	if resp.Proto != "HTTP/1.0" || b != "net/http POST /echo host= key= body=x" {
		t.Fatalf("%s %q", resp.Proto, b)
	}
	if !c.closed() {
		t.Fatal("HTTP/1.0 without keep-alive: connection left open")
	}
}

func TestConnectionClose(t *testing.T) {
	ts := newTestServer(t, nil)
	c := ts.dial(t)
	c.send(post("/echo", "x", "Connection: close") + post("/echo", "never"))
	resp, b := c.answer("POST")
	if !resp.Close || b != "fast POST /echo host=test key= body=x" {
		t.Fatalf("close %v, %q", resp.Close, b)
	}
	if !c.closed() {
		t.Fatal("connection left open after Connection: close")
	}
}

func TestAnswers(t *testing.T) {
	ts := newTestServer(t, nil)
	c := ts.dial(t)
	c.send(post("/nocontent", "x"))
	resp, b := c.answer("POST")
	if resp.StatusCode != 204 || b != "" || resp.Header.Get("Content-Length") != "" {
		t.Fatalf("204: %v %q", resp.Header, b)
	}
	c.send(post("/sniff", ""))
	resp, b = c.answer("POST")
	if ct := resp.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" || b != "<html><body>hi</body></html>" {
		t.Fatalf("sniffed %q, body %q", ct, b)
	}
	if resp.Header.Get("Injected") != "" || resp.Header.Get("X-Bad") != "a  Injected: yes" {
		t.Fatalf("header not cleaned: %v", resp.Header)
	}
}

func TestPanicClosesTheConnection(t *testing.T) {
	ts := newTestServer(t, nil)
	c := ts.dial(t)
	// The answer to the request before the panic is sent.
	c.send(post("/echo", "before") + post("/echo", "x", "X-Panic: 1"))
	if _, b := c.answer("POST"); b != "fast POST /echo host=test key= body=before" {
		t.Fatalf("before the panic: %q", b)
	}
	if !c.closed() {
		t.Fatal("connection left open after a panic")
	}
	if !strings.Contains(ts.logs.String(), "panic serving") {
		t.Fatalf("panic not logged: %q", ts.logs.String())
	}
	c = ts.dial(t)
	c.send(post("/echo", "x"))
	if _, b := c.answer("POST"); b != "fast POST /echo host=test key= body=x" {
		t.Fatalf("after a panic: %q", b)
	}
}

func TestTimeouts(t *testing.T) {
	ts := newTestServer(t, func(s *Server) {
		s.ReadHeaderTimeout = 100 * time.Millisecond
		s.IdleTimeout = 300 * time.Millisecond
	})
	// A header that does not end.
	c := ts.dial(t)
	start := time.Now()
	c.send("POST /echo HTTP/1.1\r\nHost: te")
	if !c.closed() {
		t.Fatal("slow header: connection left open")
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 2*time.Second {
		t.Fatalf("slow header closed after %v, want about 100 ms", d)
	}
	// A body that does not arrive.
	c = ts.dial(t)
	c.send("POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\r\nab")
	if !c.closed() {
		t.Fatal("slow body: connection left open")
	}
	// Idle after a request: open for longer than the header timeout,
	// closed after the idle timeout.
	c = ts.dial(t)
	c.send(post("/echo", "x"))
	c.answer("POST")
	time.Sleep(200 * time.Millisecond)
	c.send(post("/echo", "y"))
	if _, b := c.answer("POST"); b != "fast POST /echo host=test key= body=y" {
		t.Fatalf("after 200 ms idle: %q", b)
	}
	start = time.Now()
	if !c.closed() {
		t.Fatal("idle: connection left open")
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 2*time.Second {
		t.Fatalf("idle connection closed after %v, want about 300 ms", d)
	}
}

func TestWriteTimeout(t *testing.T) {
	const size = 16 << 20
	handled := make(chan struct{})
	ts := newTestServer(t, func(s *Server) {
		s.WriteTimeout = 200 * time.Millisecond
		s.Routes = append(s.Routes, Route{Method: "POST", Path: "/big", Handler: http.HandlerFunc(
			func(w http.ResponseWriter, r *http.Request) {
				_, _ = w.Write(make([]byte, size))
				close(handled)
			})})
	})
	c := ts.dial(t)
	c.send(post("/big", ""))
	// The client does not read: the server gives up on the write. The
	// write deadline starts when the handler returns, which a loaded
	// machine may delay: wait for that, then ten times the deadline.
	select {
	case <-handled:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler did not return within 30 s")
	}
	time.Sleep(2 * time.Second)
	n, _ := io.Copy(io.Discard, c.br)
	if n >= size {
		t.Fatalf("read %d bytes: the whole answer, from a server that should have closed", n)
	}
}

func TestShutdown(t *testing.T) {
	ts := newTestServer(t, nil)
	idle := ts.dial(t)
	idle.send(post("/echo", "x"))
	idle.answer("POST")
	handedOff := ts.dial(t)
	handedOff.send(post("/other", "x"))
	handedOff.answer("POST")
	busy := ts.dial(t)
	busy.send(post("/echo", "slow", "X-Sleep: 300ms"))
	time.Sleep(50 * time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- ts.srv.Shutdown(ctx) }()
	resp, b := busy.answer("POST")
	if b != "fast POST /echo host=test key= body=slow" || !resp.Close {
		t.Fatalf("in-flight request: %q, close %v", b, resp.Close)
	}
	if err := <-errc; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	for name, c := range map[string]*rawConn{"idle": idle, "busy": busy, "handed off": handedOff} {
		if !c.closed() {
			t.Errorf("%s connection left open", name)
		}
	}
	if err := <-ts.done; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve: %v", err)
	}
	ts.done <- http.ErrServerClosed // for the cleanup
	if _, err := net.Dial("tcp", ts.addr); err == nil {
		t.Fatal("still accepting after Shutdown")
	}
}

// TestClients runs net/http's client against the server from many
// goroutines, on both paths.
func TestClients(t *testing.T) {
	ts := newTestServer(t, nil)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	defer hc.CloseIdleConnections()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				path := "/echo"
				if i%10 == 9 {
					path = "/other"
				}
				body := fmt.Sprintf("%d-%d", g, i)
				req, _ := http.NewRequest("POST", "http://"+ts.addr+path, strings.NewReader(body))
				req.Header.Set("X-Key", "k")
				resp, err := hc.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if !strings.HasSuffix(string(b), "POST "+path+" host="+ts.addr+" key=k body="+body) {
					t.Errorf("%s: %q", path, b)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func BenchmarkServe(b *testing.B) {
	s := &Server{Handler: http.NotFoundHandler(), Routes: []Route{{Method: "POST", Path: "/json",
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Content-Type"] = []string{"application/json"}
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = w.Write([]byte(`{"overallCode":"OK"}`))
		})}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	defer s.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	req := []byte(post("/json", `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`))
	br := bufio.NewReader(c)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
	}
}
