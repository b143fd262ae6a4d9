package httplimit_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/middleware/httplimit"
)

// send sends method path with body (nil for none) and headers hdr (name,
// value pairs), and returns the status and the RateLimit field.
func send(t *testing.T, ts *httptest.Server, method, path string, body io.Reader, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if _, err := io.Copy(io.Discard, res.Body); err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, res.Header.Get("RateLimit")
}

// startServer serves h on loopback for the test.
func startServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ts.Client().CloseIdleConnections()
		ts.Close()
	})
	return ts
}

func newMiddleware(t *testing.T, opts httplimit.Options) *httplimit.Middleware {
	t.Helper()
	m, err := httplimit.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// authTenant stands for an authentication middleware: it puts the
// X-Tenant header's value, if any, in the context under tenantKey{}.
func authTenant(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get("X-Tenant"); v != "" {
			r = r.WithContext(context.WithValue(r.Context(), tenantKey{}, v))
		}
		next.ServeHTTP(w, r)
	})
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })

// A policy keyed by tenant and route, behind an authentication middleware:
// one budget per combination, and requests without a tenant exempt.
func TestKeyJoinOfContextAndRoute(t *testing.T) {
	clk := newFakeClock()
	m := newMiddleware(t, httplimit.Options{Store: memStore(t, clk), Now: clk.Now, Policies: []httplimit.Policy{{
		Name: "tenant-route", Limit: limit.FixedWindow(1, time.Hour),
		Key: httplimit.KeyJoin(httplimit.KeyContext(tenantKey{}), httplimit.KeyRoute),
	}}})
	ts := startServer(t, authTenant(m.Handler(okHandler)))
	for i, c := range []struct {
		method, path, tenant string
		want                 int
	}{
		{"GET", "/a", "acme", 200}, {"GET", "/a", "acme", 429}, // acme|GET /a spent
		{"POST", "/a", "acme", 200}, {"GET", "/b", "acme", 200}, // other routes
		{"GET", "/a", "globex", 200}, // another tenant
	} {
		if code, _ := send(t, ts, c.method, c.path, nil, "X-Tenant", c.tenant); code != c.want {
			t.Errorf("request %d (%s %s of %s): %d, want %d", i, c.method, c.path, c.tenant, code, c.want)
		}
	}
	for i := range 3 {
		if code, rl := send(t, ts, "GET", "/a", nil); code != 200 || rl != "" {
			t.Errorf("request %d without a tenant: %d, RateLimit %q; want exempt: 200 without the field", i, code, rl)
		}
	}
}

type tenantID int

func (t tenantID) String() string { return "tenant-" + string(rune('0'+t)) }

func TestKeyContextValues(t *testing.T) {
	key := httplimit.KeyContext(tenantKey{})
	r := httptest.NewRequest("GET", "/", nil)
	for _, c := range []struct {
		v    any
		want string
	}{
		{nil, ""}, {"acme", "acme"}, {tenantID(3), "tenant-3"}, {42, "42"}, {int64(-7), "-7"},
		{uint64(1 << 63), "9223372036854775808"}, {3.5, ""}, {[]byte("x"), ""},
	} {
		rr := r
		if c.v != nil {
			rr = r.WithContext(context.WithValue(r.Context(), tenantKey{}, c.v))
		}
		if got := key(rr); got != c.want {
			t.Errorf("KeyContext of %#v = %q, want %q", c.v, got, c.want)
		}
	}
	join := httplimit.KeyJoin(httplimit.KeyConst("a"), httplimit.KeyConst(""), httplimit.KeyConst("c"))
	if got := join(r); got != "" {
		t.Errorf("KeyJoin with an empty part = %q, want \"\"", got)
	}
	if got := httplimit.KeyJoin()(r); got != "" {
		t.Errorf("KeyJoin of nothing = %q, want \"\"", got)
	}
}

// Inside a ServeMux, KeyRoute keys by the pattern, so every item shares the
// route's budget; in front of the mux, by method and path.
func TestKeyRouteInsideAndInFrontOfTheMux(t *testing.T) {
	clk := newFakeClock()
	policies := []httplimit.Policy{{Name: "per-route", Limit: limit.FixedWindow(1, time.Hour), Key: httplimit.KeyRoute}}
	inside := newMiddleware(t, httplimit.Options{Store: memStore(t, clk), Now: clk.Now, Policies: policies})
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", inside.Handler(okHandler))
	tsInside := startServer(t, mux)
	front := newMiddleware(t, httplimit.Options{Store: memStore(t, clk), Now: clk.Now, Policies: policies})
	mux2 := http.NewServeMux()
	mux2.Handle("GET /items/{id}", okHandler)
	tsFront := startServer(t, front.Handler(mux2))
	for i, c := range []struct {
		ts   *httptest.Server
		path string
		want int
	}{
		{tsInside, "/items/1", 200}, {tsInside, "/items/2", 429}, // one pattern, one budget
		{tsFront, "/items/1", 200}, {tsFront, "/items/2", 200}, {tsFront, "/items/1", 429}, // one per path
	} {
		if code, _ := send(t, c.ts, "GET", c.path, nil); code != c.want {
			t.Errorf("request %d (%s): %d, want %d", i, c.path, code, c.want)
		}
	}
	long := "/" + strings.Repeat("x", 2000)
	if got := httplimit.KeyRoute(httptest.NewRequest("GET", long, nil)); len(got) != len("GET ")+512 {
		t.Errorf("a %d-byte path gives a %d-byte key, want it cut at 512 bytes", len(long), len(got))
	}
}

// KeyIP on a policy of its own uses its ClientIP, not Options.ClientIP: here
// the one policy trusting the loopback proxy tells clients apart by
// X-Forwarded-For, the other (nil: RemoteAddr only) sees one client.
func TestKeyIPPerPolicy(t *testing.T) {
	clk := newFakeClock()
	m := newMiddleware(t, httplimit.Options{Store: memStore(t, clk), Now: clk.Now, Policies: []httplimit.Policy{
		{Name: "per-client", Limit: limit.FixedWindow(1, time.Hour), Key: httplimit.KeyIP(trustedXFF(t))},
		{Name: "per-peer", Limit: limit.FixedWindow(3, time.Hour), Key: httplimit.KeyIP(nil)},
	}})
	ts := startServer(t, m.Handler(okHandler))
	for i, c := range []struct {
		client string
		want   int
	}{
		{"203.0.113.9", 200}, {"203.0.113.9", 429}, // per-client spent
		{"203.0.113.10", 200}, {"203.0.113.11", 200}, // per-peer: 3 admitted from loopback
		{"203.0.113.12", 429}, // per-peer spent
	} {
		if code, _ := send(t, ts, "GET", "/", nil, "X-Forwarded-For", c.client); code != c.want {
			t.Errorf("request %d from %s: %d, want %d", i, c.client, code, c.want)
		}
	}
}

func trustedXFF(t *testing.T) *httplimit.ClientIP {
	c := trustedLoopback(t)
	c.Header = httplimit.ProxyHeaderXFF
	return c
}

// Uploads spend their size: CostContentLength(1024, 1) on a budget of 10
// admits 5 KiB and then 4, and refuses 2 more.
func TestCostContentLengthOnServer(t *testing.T) {
	clk := newFakeClock()
	m := newMiddleware(t, httplimit.Options{Store: memStore(t, clk), Now: clk.Now,
		Cost:     httplimit.CostContentLength(1024, 1),
		Policies: []httplimit.Policy{{Name: "bytes", Limit: limit.FixedWindow(10, time.Hour), Key: httplimit.KeyConst("all")}}})
	ts := startServer(t, m.Handler(okHandler))
	for i, c := range []struct {
		size   int
		want   int
		remain string
	}{
		{5000, 200, `"bytes";r=5;`}, {4000, 200, `"bytes";r=1;`}, {2048, 429, `"bytes";r=1;`}, {0, 200, `"bytes";r=0;`},
	} {
		code, rl := send(t, ts, "POST", "/upload", strings.NewReader(strings.Repeat("x", c.size)))
		if code != c.want || !strings.HasPrefix(rl, c.remain) {
			t.Errorf("upload %d of %d bytes: %d, RateLimit %q; want %d, %s", i, c.size, code, rl, c.want, c.remain)
		}
	}
	if got := httplimit.CostContentLength(0, 0)(httptest.NewRequest("POST", "/", strings.NewReader("abc"))); got != 3 {
		t.Errorf("unit 0 (taken as 1 byte): cost %d, want 3", got)
	}
}

// A declared length near the largest int64 costs its size, not min: a
// client cannot make a huge upload cheap by overflowing the rounding. On a
// real server, such a Content-Length is refused by a budget of 100 KiB.
func TestCostContentLengthHugeDeclaredLength(t *testing.T) {
	cost := httplimit.CostContentLength(1024, 1)
	for _, n := range []int64{math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 - 1023, 1<<62 + 1} {
		r := httptest.NewRequest("POST", "/", nil)
		r.ContentLength = n
		want := n / 1024
		if n%1024 != 0 {
			want++
		}
		if got := cost(r); got != want {
			t.Errorf("Content-Length %d: cost %d, want %d", n, got, want)
		}
	}

	clk := newFakeClock()
	m := newMiddleware(t, httplimit.Options{Store: memStore(t, clk), Now: clk.Now, Cost: cost,
		Policies: []httplimit.Policy{{Name: "bytes", Limit: limit.FixedWindow(100, time.Hour), Key: httplimit.KeyConst("all")}}})
	var served atomic.Int64
	ts := startServer(t, m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
	})))
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", int64(math.MaxInt64), strings.Repeat("x", 4096))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || served.Load() != 0 {
		t.Errorf("Content-Length %d on a budget of 100 units: status %d, handler ran %d times; want 429, 0",
			int64(math.MaxInt64), resp.StatusCode, served.Load())
	}
}

// KeyHeader cuts a value at 512 bytes: two API keys that differ only past
// byte 512 share one counter, and the store is never handed a longer key.
func TestKeyHeaderCutAt512Bytes(t *testing.T) {
	key := httplimit.KeyHeader("X-API-Key")
	long := strings.Repeat("k", 512)
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-API-Key", long+"-first")
	if got := key(r); got != long {
		t.Fatalf("a %d-byte value keyed as %d bytes, want its first 512", len(long)+6, len(got))
	}
	clk := newFakeClock()
	m := newMiddleware(t, httplimit.Options{Store: memStore(t, clk), Now: clk.Now,
		Policies: []httplimit.Policy{{Name: "per-key", Limit: limit.FixedWindow(1, time.Hour), Key: key}}})
	ts := startServer(t, m.Handler(okHandler))
	if code, _ := send(t, ts, "GET", "/", nil, "X-API-Key", long+"-first"); code != 200 {
		t.Fatalf("first key: %d, want 200", code)
	}
	if code, _ := send(t, ts, "GET", "/", nil, "X-API-Key", long+"-second"); code != 429 {
		t.Fatalf("a key equal to the first over 512 bytes: %d, want 429 (one counter)", code)
	}
}

// A cost function that returns a negative cost counts as 0: it spends
// nothing, so the policy's remaining stays where it was.
func TestNegativeCostCountsAsZero(t *testing.T) {
	clk := newFakeClock()
	m := newMiddleware(t, httplimit.Options{Store: memStore(t, clk), Now: clk.Now,
		Cost:     func(*http.Request) int64 { return -5 },
		Policies: []httplimit.Policy{{Name: "all", Limit: limit.FixedWindow(2, time.Hour), Key: httplimit.KeyConst("all")}}})
	ts := startServer(t, m.Handler(okHandler))
	for i := range 4 {
		if code, rl := send(t, ts, "GET", "/", nil); code != 200 || !strings.HasPrefix(rl, `"all";r=2;`) {
			t.Fatalf("request %d with cost -5: %d, RateLimit %q; want 200 with 2 remaining", i, code, rl)
		}
	}
}
