package service

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestPromiseRESTHeaderBoundClosesConnection: docs/limiterd.md's "request
// header ... 16 KiB ... REST 431, then the connection closed" (README: 431),
// with no setting, as a client on a raw connection sees it: a request with
// a 17 KiB header field is answered 431 and the connection ends (EOF, not a
// reset that could lose the answer), on POST /limit (limiterd's own HTTP/1
// server) and on GET /health (handed to net/http); one with a 15 KiB field
// gets the ordinary answer, and the connection serves the next request.
func TestPromiseRESTHeaderBoundClosesConnection(t *testing.T) {
	t.Parallel()
	p := start(t, "")
	for _, c := range []struct{ method, path, head string }{
		{"POST", "/limit", "X-Client-Key: header-close\r\nContent-Length: 0\r\n"},
		{"GET", "/health", ""},
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			req := func(kib int) string {
				return c.method + " " + c.path + " HTTP/1.1\r\nHost: limiterd\r\n" + c.head +
					"X-Junk: " + strings.Repeat("j", kib<<10) + "\r\n\r\n"
			}
			conn, br := dialRaw(t, p.http)
			for i := range 2 {
				if code := sendRaw(t, conn, br, c.method, req(15)); code != http.StatusOK {
					t.Fatalf("request %d with a 15 KiB header field: %d, want 200", i+1, code)
				}
			}

			conn, br = dialRaw(t, p.http)
			if code := sendRaw(t, conn, br, c.method, req(17)); code != http.StatusRequestHeaderFieldsTooLarge {
				t.Fatalf("a 17 KiB header field: %d, want 431", code)
			}
			if b, err := br.ReadByte(); err != io.EOF {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatal("after the 431 the connection stayed open for 5 s")
				}
				t.Fatalf("after the 431: byte %q, error %v; want EOF", b, err)
			}
		})
	}
}

// dialRaw connects to addr, with a deadline of 5 s from now for what
// follows.
func dialRaw(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	return conn, bufio.NewReader(conn)
}

// sendRaw writes req and returns the status of its answer, whose body it
// reads.
func sendRaw(t *testing.T, conn net.Conn, br *bufio.Reader, method, req string) int {
	t.Helper()
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatalf("reading the answer's body: %v", err)
	}
	return resp.StatusCode
}
