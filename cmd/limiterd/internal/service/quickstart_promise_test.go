package service

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestPromiseQuickStartAnswers: limiterd with no file and no flags but the
// addresses is a token bucket of 10 tokens refilled 1/s per key, and its
// first answer is the one docs/limiterd.md's quick start shows, headers
// and body; the eleventh call within a second gets 429 with Retry-After: 1
// and a problem+json body.
func TestPromiseQuickStartAnswers(t *testing.T) {
	p := start(t, "")
	began := time.Now()
	r := p.post("/limit", "", "X-Client-Key", "alice")
	if r.StatusCode != http.StatusOK {
		t.Fatalf("first call: %d %s", r.StatusCode, body(t, r))
	}
	for name, want := range map[string]string{
		"Content-Type":     "application/json",
		"Ratelimit":        `"token_bucket";r=9;t=1`,
		"Ratelimit-Policy": `"token_bucket";q=10`,
	} {
		if got := r.Header.Get(name); got != want {
			t.Errorf("first call: %s %q, want %q", name, got, want)
		}
	}
	var got map[string]any
	if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"allowed": true, "limit": 10.0, "remaining": 9.0, "reset_after_seconds": 1.0}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("first call's body %v, want %v", got, want)
	}

	// Nine more pass; the bucket refills 1 token a second, so a slow
	// machine may see one more pass per second elapsed, never fewer.
	allowed := 1
	var denied *http.Response
	for i := 0; i < 40 && denied == nil; i++ {
		r := p.post("/limit", "", "X-Client-Key", "alice")
		switch r.StatusCode {
		case http.StatusOK:
			allowed++
		case http.StatusTooManyRequests:
			denied = r
		default:
			t.Fatalf("call %d: %d %s", i+2, r.StatusCode, body(t, r))
		}
	}
	elapsed := time.Since(began)
	if denied == nil {
		t.Fatalf("no 429 after %d calls in %v", allowed, elapsed)
	}
	if allowed < 10 || allowed > 10+int(elapsed/time.Second) {
		t.Fatalf("%d calls allowed before the first 429, in %v; want 10 (plus one per second elapsed)", allowed, elapsed)
	}
	if ra := denied.Header.Get("Retry-After"); ra != "1" {
		t.Errorf("429: Retry-After %q, want \"1\"", ra)
	}
	if ct := denied.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("429: Content-Type %q, want application/problem+json", ct)
	}
	var problem map[string]any
	if err := json.NewDecoder(denied.Body).Decode(&problem); err != nil {
		t.Errorf("429 body is not JSON: %v", err)
	}
	// Another key has its own bucket.
	if r := p.post("/limit", "", "X-Client-Key", "bob"); r.StatusCode != http.StatusOK {
		t.Fatalf("another key after alice's 429: %d", r.StatusCode)
	}
}

// TestPromiseShutdownFinishesInFlightCalls: on SIGTERM limiterd stops
// accepting, lets a REST call already being read finish and answers it,
// then exits 0; with --shutdown-timeout, a call that never ends is cut at
// about that time.
func TestPromiseShutdownFinishesInFlightCalls(t *testing.T) {
	t.Run("in flight call finishes", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, dir, "gw.yaml", envoyRules)
		p := start(t, "", "--rules", dir)
		c, br := startSlowJSON(t, p)
		defer c.Close()
		p.cancel() // SIGTERM
		// Stopping, limiterd accepts no new connection (or closes it
		// unanswered).
		waitFor(t, "new connections refused", func() bool { return !answers(p.http) })
		// The call in flight still gets its answer once its body ends.
		if _, err := io.WriteString(c, `"v"}]}]}`); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("the call in flight was not answered: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"overallCode":"OK"`) {
			t.Fatalf("the call in flight: %d %s", resp.StatusCode, b)
		}
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			t.Fatal("limiterd did not exit after its last call ended")
		}
		if p.exitCode != 0 {
			t.Fatalf("exit %d: %s", p.exitCode, p.stderr.String())
		}
	})
	t.Run("cut at the timeout", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, dir, "gw.yaml", envoyRules)
		p := start(t, "", "--rules", dir, "--shutdown-timeout", "1s")
		c, br := startSlowJSON(t, p)
		defer c.Close()
		stopped := time.Now()
		p.cancel()
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			t.Fatal("limiterd did not exit with a call that never ends")
		}
		took := time.Since(stopped)
		if took < 900*time.Millisecond || took > 6*time.Second {
			t.Fatalf("exited %v after the stop with --shutdown-timeout 1s", took)
		}
		// The stuck connection is closed.
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, br); err != nil {
			t.Fatalf("the stuck connection was left open: %v", err)
		}
	})
}

// startSlowJSON sends POST /json's header, with Expect: 100-continue, and
// the start of its body, and returns once limiterd has begun reading the
// body (its 100 Continue): the call is in flight.
func startSlowJSON(t *testing.T, p *proc) (net.Conn, *bufio.Reader) {
	t.Helper()
	full := `{"domain":"gw","descriptors":[{"entries":[{"key":"remote_address","value":"v"}]}]}`
	head := `{"domain":"gw","descriptors":[{"entries":[{"key":"remote_address","value":`
	c, err := net.Dial("tcp", p.http)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "POST /json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", len(full))
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("got %q, %v; want 100 Continue", line, err)
	}
	if _, err := br.ReadString('\n'); err != nil { // the blank line after it
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	return c, br
}

// answers reports whether a new connection to addr gets an answer to
// GET /health.
func answers(addr string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/health", nil)
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}
