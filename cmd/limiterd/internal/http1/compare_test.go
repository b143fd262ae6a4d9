package http1

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// plainEcho answers with the request's method, path, Host, X-Key and
// body; X-Via says which path served it and is left out of comparisons.
func plainEcho(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	via := "net/http"
	if _, ok := w.(*response); ok {
		via = "fast"
	}
	w.Header().Set("X-Via", via)
	fmt.Fprintf(w, "%s %s host=%s key=%s close=%v body=%s", r.Method, r.URL.Path, r.Host, r.Header.Get("X-Key"), r.Close, b)
}

// comparePair is a Server and a plain net/http server with the same
// handler, behind the same header bound (HeaderLimit, which the Server
// puts before the requests it hands to net/http).
type comparePair struct {
	fast, plain string
}

func newComparePair(t testing.TB) comparePair {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/", plainEcho)
	s := &Server{
		Handler:           mux,
		Routes:            []Route{{Method: "POST", Path: "/echo", Handler: mux}, {Method: "PUT", Path: "/e", Handler: mux}},
		ReadHeaderTimeout: 5 * time.Second,
		MaxHeaderBytes:    256,
		MaxBodyBytes:      64,
	}
	plain := &http.Server{Handler: HeaderLimit(mux, s.MaxHeaderBytes), ReadHeaderTimeout: 5 * time.Second}
	var p comparePair
	for _, serve := range []struct {
		addr *string
		fn   func(net.Listener) error
	}{{&p.fast, s.Serve}, {&p.plain, plain.Serve}} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		*serve.addr = ln.Addr().String()
		go func() { _ = serve.fn(ln) }()
	}
	t.Cleanup(func() { s.Close(); plain.Close() })
	return p
}

// exchange sends in to addr in pieces of at most split bytes (all at once
// when split is 0), closes its side for writing and returns all the
// server wrote.
func exchange(t testing.TB, addr string, in []byte, split int) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	out := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(c); out <- b }()
	for rest := in; len(rest) > 0; {
		n := len(rest)
		if split > 0 {
			n = min(n, split)
		}
		if _, err := c.Write(rest[:n]); err != nil {
			break // the server closed: what it wrote is compared
		}
		rest = rest[n:]
		if split > 0 {
			time.Sleep(time.Millisecond)
		}
	}
	_ = c.(*net.TCPConn).CloseWrite()
	return <-out
}

// answer is a response without what differs between the two servers.
type answer struct {
	Status int
	Header http.Header
	Body   string
}

// answers reads the responses in out; rest is what could not be read as
// one.
func answers(out []byte) (as []answer, rest string) {
	br := bufio.NewReader(bytes.NewReader(out))
	for {
		if _, err := br.Peek(1); err != nil {
			return as, ""
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
		if err != nil {
			b, _ := io.ReadAll(br)
			return as, err.Error() + ": " + string(b)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return as, err.Error()
		}
		resp.Header.Del("Date")
		resp.Header.Del("X-Via")
		as = append(as, answer{resp.StatusCode, resp.Header, string(b)})
	}
}

// sameAnswers checks that the Server and net/http answer in the same way
// to in.
func sameAnswers(t *testing.T, p comparePair, in []byte, split int) {
	t.Helper()
	fa, fr := answers(exchange(t, p.fast, in, split))
	pa, pr := answers(exchange(t, p.plain, in, split))
	if !reflect.DeepEqual(fa, pa) || fr != pr {
		t.Fatalf("to %q:\nServer   %v %q\nnet/http %v %q", in, fa, fr, pa, pr)
	}
}

func TestSameAnswersAsNetHTTP(t *testing.T) {
	p := newComparePair(t)
	req := "POST /echo HTTP/1.1\r\nHost: h\r\nX-Key: k\r\nContent-Length: 2\r\n\r\nab"
	for _, in := range []string{
		req,
		req + req + req,
		req + "\r\n" + req + "\r\n\r\n",
		req + "\r\nGET /echo HTTP/1.1\r\nHost: h\r\n\r\n",
		req + "\r\n\r\n\r\nGET /echo HTTP/1.1\r\nHost: h\r\n\r\n",
		req + "POST /echo HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n" + req,
		req + "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 9\r\n\r\nabc",
		req + "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Le",
		req + "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 65\r\n\r\n" + strings.Repeat("x", 65),
		req + "POST /echo HTTP/1.1\r\nHost: h\r\nX-Key: " + strings.Repeat("k", 300) + "\r\n\r\n",
		req + "POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n" + req,
		req + "POST /echo HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx",
		req + "POST /echo HTTP/1.0\r\nContent-Length: 1\r\n\r\nx" + req,
		req + "HEAD /echo HTTP/1.1\r\nHost: h\r\n\r\n" + req,
		req + "PUT /e HTTP/1.1\r\nHost: h\r\n\r\n" + req,
		req + "BAD\r\n\r\n",
		"\r\n" + req,
	} {
		for _, split := range []int{0, 7} {
			sameAnswers(t, p, []byte(in), split)
		}
	}
}

// FuzzSameAnswersAsNetHTTP sends any bytes to a Server and to a net/http
// server and compares their answers (go test -fuzz FuzzSameAnswers
// ./internal/http1).
func FuzzSameAnswersAsNetHTTP(f *testing.F) {
	req := "POST /echo HTTP/1.1\r\nHost: h\r\nX-Key: k\r\nContent-Length: 2\r\n\r\nab"
	for _, s := range []string{
		req, req + req, req + "\r\n" + req, req + "GET / HTTP/1.1\r\nHost: h\r\n\r\n",
		"PUT /e HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n" + req,
		req + "POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n",
	} {
		f.Add([]byte(s), uint8(0))
	}
	p := newComparePair(f)
	f.Fuzz(func(t *testing.T, in []byte, split uint8) {
		if bytes.Contains(bytes.ToLower(in), []byte("expect")) && split > 0 {
			// A 100 Continue's timing depends on when the body's
			// bytes arrive, on either server.
			split = 0
		}
		sameAnswers(t, p, in, int(split%32))
	})
}
