package http1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

var testRoutes = []Route{
	{Method: "POST", Path: "/json", Handler: http.NotFoundHandler()},
	{Method: "POST", Path: "/limit", Handler: http.NotFoundHandler()},
}

var testLimits = limits{maxHeader: 256, maxBody: 64}

func TestParse(t *testing.T) {
	cases := []struct {
		name, in  string
		afterPost bool
		want      parseResult
	}{
		{"plain", "POST /json HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}", false, ready},
		{"no body", "POST /limit HTTP/1.1\r\nHost: a:80\r\nX-Client-Key: k\r\n\r\n", false, ready},
		{"body to come", "POST /json HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n{}", false, needMore},
		{"header to come", "POST /json HTTP/1.1\r\nHost: a\r\nContent-Le", false, needMore},
		{"line to come", "POST /js", false, needMore},
		{"nothing", "", false, needMore},
		{"stray CRLF after a POST", "\r\nPOST /json HTTP/1.1\r\nHost: a\r\n\r\n", true, ready},
		{"stray CRLF to come", "\r\n", true, needMore},
		{"stray CRLF otherwise", "\r\nPOST /json HTTP/1.1\r\nHost: a\r\n\r\n", false, handOff},
		{"five stray bytes", "\r\n\r\n\rPOST /json HTTP/1.1\r\nHost: a\r\n\r\n", true, handOff},
		{"other path", "POST /other HTTP/1.1\r\nHost: a\r\n\r\n", false, handOff},
		{"query", "POST /json?x=1 HTTP/1.1\r\nHost: a\r\n\r\n", false, handOff},
		{"other method", "GET /json HTTP/1.1\r\nHost: a\r\n\r\n", false, handOff},
		{"lower-case method", "post /json HTTP/1.1\r\nHost: a\r\n\r\n", false, handOff},
		{"HTTP/1.0", "POST /json HTTP/1.0\r\nHost: a\r\n\r\n", false, handOff},
		{"absolute form", "POST http://a/json HTTP/1.1\r\nHost: a\r\n\r\n", false, handOff},
		{"two spaces", "POST  /json HTTP/1.1\r\nHost: a\r\n\r\n", false, handOff},
		{"garbage", "GARBAGE\r\n\r\n", false, handOff},
		{"bare LF", "POST /json HTTP/1.1\nHost: a\n\n", false, handOff},
		{"bare LF in header", "POST /json HTTP/1.1\r\nHost: a\n\r\n", false, handOff},
		{"no Host", "POST /json HTTP/1.1\r\n\r\n", false, handOff},
		{"two Hosts", "POST /json HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", false, handOff},
		{"odd Host", "POST /json HTTP/1.1\r\nHost: a b\r\n\r\n", false, handOff},
		{"chunked", "POST /json HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", false, handOff},
		{"expect", "POST /json HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n", false, handOff},
		{"upgrade", "POST /json HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n", false, handOff},
		{"connection upgrade", "POST /json HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n\r\n", false, handOff},
		{"connection close", "POST /json HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Close\r\n\r\n", false, ready},
		{"folded line", "POST /json HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n", false, handOff},
		{"space before colon", "POST /json HTTP/1.1\r\nHost: a\r\nX-A : b\r\n\r\n", false, handOff},
		{"no colon", "POST /json HTTP/1.1\r\nHost: a\r\nX-A\r\n\r\n", false, handOff},
		{"control byte", "POST /json HTTP/1.1\r\nHost: a\r\nX-A: b\x01c\r\n\r\n", false, handOff},
		{"two lengths", "POST /json HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}", false, handOff},
		{"signed length", "POST /json HTTP/1.1\r\nHost: a\r\nContent-Length: +2\r\n\r\n{}", false, handOff},
		{"body over the limit", "POST /json HTTP/1.1\r\nHost: a\r\nContent-Length: 65\r\n\r\n", false, handOff},
		{"header over the limit", "POST /json HTTP/1.1\r\nHost: a\r\nX-A: " + strings.Repeat("b", 256) + "\r\n\r\n", false, handOff},
		{"header over the limit so far", "POST /json HTTP/1.1\r\nHost: a\r\nX-A: " + strings.Repeat("b", 256), false, handOff},
		{"pragma", "POST /json HTTP/1.1\r\nHost: a\r\nPragma: no-cache\r\n\r\n", false, handOff},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var req request
			if got := parse([]byte(c.in), testRoutes, testLimits, c.afterPost, &req); got != c.want {
				t.Fatalf("parse(%q) = %v, want %v", c.in, got, c.want)
			}
			checkAgainstNetHTTP(t, []byte(c.in), c.afterPost)
		})
	}
}

// checkAgainstNetHTTP checks that what parse serves itself, net/http reads
// the same way: the same route, Host, header, body, length and
// Connection: close, ending at the same byte; and that what parse waits
// for, net/http waits for too.
func checkAgainstNetHTTP(t *testing.T, in []byte, afterPost bool) {
	t.Helper()
	var req request
	res := parse(in, testRoutes, testLimits, afterPost, &req)
	src := &endReader{r: bytes.NewReader(in)}
	br := bufio.NewReader(src)
	if afterPost {
		peek, _ := br.Peek(4)
		n := 0
		for n < len(peek) && (peek[n] == '\r' || peek[n] == '\n') {
			n++
		}
		_, _ = br.Discard(n)
	}
	hr, err := http.ReadRequest(br)
	switch res {
	case handOff:
		return
	case needMore:
		if err == nil {
			_, err = io.ReadAll(hr.Body)
		}
		if !src.ended {
			t.Fatalf("parse(%q) waits for more; net/http does not: %v", in, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("parse(%q) serves it; net/http: %v", in, err)
	}
	if hr.Method != req.route.Method || hr.RequestURI != req.route.Path || hr.URL.Path != req.route.Path ||
		hr.URL.RawQuery != "" || hr.Proto != "HTTP/1.1" {
		t.Fatalf("parse(%q): route %s %s; net/http %s %s %s", in, req.route.Method, req.route.Path, hr.Method, hr.RequestURI, hr.Proto)
	}
	if hr.Host != string(req.host) {
		t.Fatalf("parse(%q): Host %q; net/http %q", in, req.host, hr.Host)
	}
	delete(hr.Header, "Host")
	got := http.Header{}
	for _, f := range req.fields {
		got[canonicalName(f[0])] = append(got[canonicalName(f[0])], string(f[1]))
	}
	if len(got) == 0 {
		got = http.Header{}
	}
	if !reflect.DeepEqual(got, hr.Header) {
		t.Fatalf("parse(%q): header %v; net/http %v", in, got, hr.Header)
	}
	if hr.ContentLength != int64(req.bodyLen) || hr.Close != req.close || len(hr.TransferEncoding) > 0 {
		t.Fatalf("parse(%q): length %d, close %v; net/http %d, %v, %v", in, req.bodyLen, req.close, hr.ContentLength, hr.Close, hr.TransferEncoding)
	}
	b, err := io.ReadAll(hr.Body)
	if err != nil || !bytes.Equal(b, in[req.hdrLen:req.hdrLen+req.bodyLen]) {
		t.Fatalf("parse(%q): body %q; net/http %q, %v", in, in[req.hdrLen:req.hdrLen+req.bodyLen], b, err)
	}
	if rest := br.Buffered(); rest != len(in)-req.hdrLen-req.bodyLen {
		t.Fatalf("parse(%q): %d bytes after the request; net/http %d", in, len(in)-req.hdrLen-req.bodyLen, rest)
	}
}

// endReader reads r, then errMore, which stands for a read that would
// wait for the client; ended records that it came to that.
type endReader struct {
	r     io.Reader
	ended bool
}

var errMore = errors.New("the rest has not arrived")

func (e *endReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		e.ended = true
		err = errMore
	}
	return n, err
}

// FuzzParse checks parse against net/http on any bytes (go test -fuzz
// FuzzParse ./internal/http1).
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"POST /json HTTP/1.1\r\nHost: localhost:8080\r\nUser-Agent: Go-http-client/1.1\r\nContent-Length: 2\r\nAccept-Encoding: gzip\r\n\r\n{}",
		"POST /limit HTTP/1.1\r\nHost: a\r\nX-Client-Key: alice\r\nX-Required-Tokens: 2.5\r\nconnection: close\r\n\r\n",
		"\r\nPOST /json HTTP/1.1\r\nHost: [::1]:80\r\nx-a:\tb \r\nX-A: c\r\n\r\n",
		"POST /json HTTP/1.1\r\nHost: a\r\nContent-Length: 01\r\n\r\n{POST /json HTTP/1.1\r\n",
		"POST /json HTTP/1.1\r\nHost: a\r\nX-\xff: \xfe\r\n\r\n",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, in []byte, afterPost bool) {
		checkAgainstNetHTTP(t, in, afterPost)
	})
}

func BenchmarkParse(b *testing.B) {
	in := []byte("POST /json HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: Go-http-client/1.1\r\nContent-Length: 80\r\nAccept-Encoding: gzip\r\n\r\n" + strings.Repeat("x", 80))
	var req request
	lim := limits{maxHeader: 8 << 10, maxBody: 64 << 10}
	b.ReportAllocs()
	for b.Loop() {
		if parse(in, testRoutes, lim, true, &req) != ready {
			b.Fatal("not ready")
		}
	}
}
