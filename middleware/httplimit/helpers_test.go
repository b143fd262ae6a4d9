package httplimit_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/middleware/httplimit"
	"github.com/costwise/batcher/middleware/internal/sftest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeClock is the clock of the memory store and of the headers: time moves
// only when a test says so, so no test sleeps.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_800_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// memStore returns a memory store on clock.
func memStore(t testing.TB, clock limit.Clock) *limit.Memory {
	t.Helper()
	s, err := limit.NewMemory(limit.MemoryOptions{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// serve starts a real server with the middleware of opts around a handler
// that answers 200 "ok".
func serve(t testing.TB, opts httplimit.Options) *httptest.Server {
	t.Helper()
	m, err := httplimit.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})))
	t.Cleanup(func() {
		ts.Client().CloseIdleConnections()
		ts.Close()
	})
	return ts
}

// response is what a test reads back from a request.
type response struct {
	code int
	h    http.Header
	body []byte
}

// get sends GET path with headers hdr (name, value pairs).
func get(t testing.TB, ts *httptest.Server, hdr ...string) response {
	t.Helper()
	req, err := http.NewRequest("GET", ts.URL+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	res, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{code: res.StatusCode, h: res.Header, body: body}
}

// draft is the parsed RateLimit and RateLimit-Policy fields of a response,
// checked against the structured-field grammar and the draft's rules.
type draft struct {
	policy        string
	q, w, r, t    int64
	hasW          bool
	retryAfter    int64
	hasRetryAfter bool
}

func parseDraft(t testing.TB, res response) draft {
	t.Helper()
	var d draft
	pol, err := sftest.ParseList(res.h.Get("RateLimit-Policy"))
	if err != nil {
		t.Fatalf("RateLimit-Policy %q: %v", res.h.Get("RateLimit-Policy"), err)
	}
	rl, err := sftest.ParseList(res.h.Get("RateLimit"))
	if err != nil {
		t.Fatalf("RateLimit %q: %v", res.h.Get("RateLimit"), err)
	}
	if len(pol) != 1 || len(rl) != 1 {
		t.Fatalf("want one policy described, got %d and %d items", len(pol), len(rl))
	}
	name, ok := pol[0].Value.(string)
	if !ok || rl[0].Value != name {
		t.Fatalf("policy items %v and %v must be the same sf-string", pol[0].Value, rl[0].Value)
	}
	d.policy = name
	d.q = sfInt(t, pol[0], "q", true)
	if pol[0].Param("w") != nil {
		d.w, d.hasW = sfInt(t, pol[0], "w", true), true
		if d.w == 0 {
			t.Errorf("w must be positive")
		}
	}
	d.r = sfInt(t, rl[0], "r", true)
	d.t = sfInt(t, rl[0], "t", false)
	if v := res.h.Get("Retry-After"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			t.Fatalf("Retry-After %q is not delay-seconds", v)
		}
		d.retryAfter, d.hasRetryAfter = n, true
		if d.t > n {
			t.Errorf("Retry-After %d is earlier than the end of the effective window t=%d", n, d.t)
		}
	}
	return d
}

// sfInt returns the non-negative Integer parameter key of it.
func sfInt(t testing.TB, it sftest.Item, key string, required bool) int64 {
	t.Helper()
	v := it.Param(key)
	if v == nil {
		if required {
			t.Fatalf("parameter %s missing in %+v", key, it)
		}
		return -1
	}
	n, ok := v.(int64)
	if !ok || n < 0 {
		t.Fatalf("parameter %s = %v, want a non-negative Integer", key, v)
	}
	return n
}

// problem parses an application/problem+json body.
func problem(t testing.TB, res response) map[string]any {
	t.Helper()
	if ct := res.h.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	var p map[string]any
	if err := json.Unmarshal(res.body, &p); err != nil {
		t.Fatalf("problem body %q: %v", res.body, err)
	}
	if p["status"] != float64(res.code) || p["type"] == nil || p["title"] == nil {
		t.Errorf("problem %v lacks RFC 9457 members matching status %d", p, res.code)
	}
	return p
}
