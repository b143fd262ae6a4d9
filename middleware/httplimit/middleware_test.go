package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/middleware/httplimit"
	"github.com/costwise/batcher/middleware/promlimit"
)

func TestDeniedAfterQuotaWithHeadersAndProblem(t *testing.T) {
	clk := newFakeClock()
	ts := serve(t, httplimit.Options{
		Policies: []httplimit.Policy{{Name: "per-ip", Limit: limit.FixedWindow(3, time.Minute)}},
		Store:    memStore(t, clk), Now: clk.Now,
	})
	for i := int64(0); i < 3; i++ {
		res := get(t, ts)
		if res.code != 200 {
			t.Fatalf("request %d: %d", i, res.code)
		}
		d := parseDraft(t, res)
		if d.policy != "per-ip" || d.q != 3 || d.w != 60 || d.r != 2-i || d.t <= 0 || d.t > 60 || d.hasRetryAfter {
			t.Errorf("request %d: %+v", i, d)
		}
	}
	res := get(t, ts)
	if res.code != http.StatusTooManyRequests {
		t.Fatalf("4th request: %d, want 429", res.code)
	}
	d := parseDraft(t, res)
	if d.r != 0 || !d.hasRetryAfter || d.retryAfter < 1 || d.retryAfter > 60 {
		t.Errorf("denied: %+v", d)
	}
	p := problem(t, res)
	if p["type"] != httplimit.QuotaExceededType {
		t.Errorf("problem type %v", p["type"])
	}
	if v, _ := p["violated-policies"].([]any); len(v) != 1 || v[0] != "per-ip" {
		t.Errorf("violated-policies %v", p["violated-policies"])
	}
}

// A client that waits Retry-After seconds is admitted, whatever the
// algorithm and however far into its period the denial came.
func TestRetryAfterNeverEarly(t *testing.T) {
	policies := limittest.EveryAlgorithm()
	for name, pol := range policies {
		t.Run(name, func(t *testing.T) {
			clk := newFakeClock()
			ts := serve(t, httplimit.Options{
				Policies: []httplimit.Policy{{Name: name, Limit: pol}},
				Store:    memStore(t, clk), Now: clk.Now,
			})
			denials := 0
			for step := 0; step < 60; step++ {
				res := get(t, ts)
				if res.code == 200 {
					// Uneven gaps put the next denial at varied offsets.
					clk.Advance(time.Duration(137*(step%5)) * time.Millisecond)
					continue
				}
				if res.code != 429 {
					t.Fatalf("step %d: status %d", step, res.code)
				}
				denials++
				d := parseDraft(t, res)
				if !d.hasRetryAfter || d.retryAfter < 1 {
					t.Fatalf("step %d: denied without a Retry-After", step)
				}
				clk.Advance(time.Duration(d.retryAfter) * time.Second)
				if again := get(t, ts); again.code != 200 {
					t.Fatalf("step %d: a client that waited Retry-After %d s was refused again (%d)", step, d.retryAfter, again.code)
				}
			}
			if denials == 0 {
				t.Fatal("the test never saw a denial")
			}
		})
	}
}

func TestForgedForwardedForIgnored(t *testing.T) {
	clk := newFakeClock()
	ts := serve(t, httplimit.Options{
		Policies: []httplimit.Policy{{Name: "per-ip", Limit: limit.FixedWindow(2, time.Minute)}},
		Store:    memStore(t, clk), Now: clk.Now,
	})
	codes := []int{}
	for i := 0; i < 4; i++ {
		res := get(t, ts, "X-Forwarded-For", "198.51.100."+string(rune('1'+i)), "Forwarded", "for=203.0.113."+string(rune('1'+i)))
		codes = append(codes, res.code)
	}
	if codes[2] != 429 || codes[3] != 429 {
		t.Errorf("a client rotating forged X-Forwarded-For and Forwarded got %v; the peer is not a trusted proxy, so all share its budget", codes)
	}
}

func trustedLoopback(t *testing.T) *httplimit.ClientIP {
	p, err := httplimit.ParsePrefixes("127.0.0.0/8", "::1")
	if err != nil {
		t.Fatal(err)
	}
	return &httplimit.ClientIP{TrustedProxies: p}
}

func TestTrustedProxyAndIPv6Masking(t *testing.T) {
	clk := newFakeClock()
	ts := serve(t, httplimit.Options{
		Policies: []httplimit.Policy{{Name: "per-ip", Limit: limit.FixedWindow(2, time.Minute)}},
		Store:    memStore(t, clk), Now: clk.Now, ClientIP: trustedLoopback(t),
	})
	// Behind the trusted proxy, clients are told apart by X-Forwarded-For
	// (the rightmost untrusted entry, not the forgeable leftmost).
	for i, want := range []int{200, 200, 429} {
		if res := get(t, ts, "X-Forwarded-For", "6.6.6."+string(rune('1'+i))+", 198.51.100.7"); res.code != want {
			t.Errorf("client 198.51.100.7, request %d: %d, want %d", i, res.code, want)
		}
	}
	if res := get(t, ts, "X-Forwarded-For", "198.51.100.8"); res.code != 200 {
		t.Errorf("another client behind the proxy: %d, want 200", res.code)
	}
	// One host rotating through its /64 shares one budget.
	for i, addr := range []string{"2001:db8:1:2::1", "2001:db8:1:2:ffff::9", "2001:db8:1:2:aaaa:bbbb:cccc:dddd"} {
		want := 200
		if i == 2 {
			want = 429
		}
		if res := get(t, ts, "Forwarded", `for="[`+addr+`]:443"`); res.code != want {
			t.Errorf("IPv6 %s: %d, want %d", addr, res.code, want)
		}
	}
	if res := get(t, ts, "Forwarded", `for="[2001:db8:1:3::1]"`); res.code != 200 {
		t.Errorf("a neighbouring /64: %d, want 200", res.code)
	}
}

func TestSeveralPoliciesAllOrNothing(t *testing.T) {
	clk := newFakeClock()
	store := memStore(t, clk)
	perKey := limit.FixedWindow(10, time.Minute)
	ts := serve(t, httplimit.Options{
		Policies: []httplimit.Policy{
			{Name: "per-ip", Limit: limit.FixedWindow(2, time.Minute), Key: httplimit.KeyHeader("X-Client")},
			{Name: "per-key", Limit: perKey, Key: httplimit.KeyHeader("X-API-Key")},
		},
		Store: store, Now: clk.Now,
	})
	// Client a spends its 2, then is denied 3 times: nothing is spent on
	// the API key's budget by the denied requests.
	for i := 0; i < 5; i++ {
		res := get(t, ts, "X-Client", "a", "X-API-Key", "k")
		want := 200
		if i >= 2 {
			want = 429
		}
		if res.code != want {
			t.Fatalf("request %d: %d, want %d", i, res.code, want)
		}
	}
	d, err := store.AllowN(t.Context(), "k", perKey.Named("per-key"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if d.Remaining != 8 {
		t.Errorf("per-key remaining %d after 2 admitted and 3 denied requests, want 8", d.Remaining)
	}
	// The headers describe the policy closest to its limit.
	res := get(t, ts, "X-Client", "b", "X-API-Key", "k")
	if dr := parseDraft(t, res); dr.policy != "per-ip" || dr.r != 1 {
		t.Errorf("headers describe %+v, want per-ip with 1 left", dr)
	}
	// A request without an API key skips the per-key policy.
	if res := get(t, ts, "X-Client", "c"); res.code != 200 || parseDraft(t, res).policy != "per-ip" {
		t.Errorf("request without API key: %d %v", res.code, res.h)
	}
}

// The metrics come out the same through promlimit's provider and through
// the deprecated Registerer option (which promlimit, linked into this test,
// serves).
func TestShadowModeAndMetrics(t *testing.T) {
	for _, how := range []string{"MetricsProvider", "Registerer"} {
		t.Run(how, func(t *testing.T) {
			clk := newFakeClock()
			reg := prometheus.NewRegistry()
			opts := httplimit.Options{
				Policies: []httplimit.Policy{{Name: "per-ip", Limit: limit.GCRA(limit.PerMinute(1), 1)}},
				Store:    memStore(t, clk), Now: clk.Now, Shadow: true,
			}
			if how == "Registerer" {
				opts.Registerer = reg // deprecated, still served
			} else {
				opts.MetricsProvider = promlimit.New(reg)
			}
			checkShadowMetrics(t, serve(t, opts), reg)
		})
	}
}

func checkShadowMetrics(t *testing.T, ts *httptest.Server, reg *prometheus.Registry) {
	t.Helper()
	for i := 0; i < 3; i++ {
		res := get(t, ts)
		if res.code != 200 {
			t.Fatalf("shadow mode refused request %d: %d", i, res.code)
		}
		if d := parseDraft(t, res); d.r != 0 || d.hasRetryAfter {
			t.Errorf("request %d: %+v, want headers showing 0 left and no Retry-After", i, d)
		}
	}
	want := `
# HELP batcher_http_limit_decisions_total Rate-limit decisions by policy and result (allowed, denied, shadow_denied, failed_open, failed_closed).
# TYPE batcher_http_limit_decisions_total counter
batcher_http_limit_decisions_total{policy="per-ip",result="allowed"} 1
batcher_http_limit_decisions_total{policy="per-ip",result="denied"} 0
batcher_http_limit_decisions_total{policy="per-ip",result="failed_closed"} 0
batcher_http_limit_decisions_total{policy="per-ip",result="failed_open"} 0
batcher_http_limit_decisions_total{policy="per-ip",result="shadow_denied"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "batcher_http_limit_decisions_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "batcher_http_limit_decision_duration_seconds"); n != 1 {
		t.Errorf("latency histogram: %d series", n)
	}
}

func TestAllowList(t *testing.T) {
	clk := newFakeClock()
	ts := serve(t, httplimit.Options{
		Policies: []httplimit.Policy{{Name: "per-ip", Limit: limit.FixedWindow(1, time.Minute)}},
		Store:    memStore(t, clk), Now: clk.Now,
		AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")},
	})
	for i := 0; i < 3; i++ {
		if res := get(t, ts); res.code != 200 || res.h.Get("RateLimit") != "" {
			t.Fatalf("allow-listed client: %d %v", res.code, res.h)
		}
	}
	ts = serve(t, httplimit.Options{
		Policies: []httplimit.Policy{{Name: "per-key", Limit: limit.FixedWindow(1, time.Minute), Key: httplimit.KeyHeader("X-API-Key")}},
		Store:    memStore(t, clk), Now: clk.Now,
		AllowKeys: []string{"internal"},
	})
	for i := 0; i < 3; i++ {
		if res := get(t, ts, "X-API-Key", "internal"); res.code != 200 {
			t.Fatalf("allow-listed key: %d", res.code)
		}
	}
	get(t, ts, "X-API-Key", "other")
	if res := get(t, ts, "X-API-Key", "other"); res.code != 429 {
		t.Errorf("key not on the list: %d, want 429", res.code)
	}
}

func TestHeaderFormats(t *testing.T) {
	clk := newFakeClock()
	for _, tc := range []struct {
		f    httplimit.HeaderFormat
		want map[string]string
	}{
		{httplimit.HeaderTrio, map[string]string{"RateLimit-Limit": "5", "RateLimit-Remaining": "4", "RateLimit-Reset": "60"}},
		{httplimit.HeaderX, map[string]string{"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "4", "X-RateLimit-Reset": "1800000060"}},
		{httplimit.HeaderNone, map[string]string{}},
	} {
		ts := serve(t, httplimit.Options{
			Policies: []httplimit.Policy{{Name: "p", Limit: limit.FixedWindow(5, time.Minute)}},
			Store:    memStore(t, clk), Now: clk.Now, Headers: tc.f,
		})
		res := get(t, ts)
		for k, v := range tc.want {
			if res.h.Get(k) != v {
				t.Errorf("%v: %s = %q, want %q", tc.f, k, res.h.Get(k), v)
			}
		}
		for _, k := range []string{"RateLimit", "RateLimit-Policy", "RateLimit-Limit", "X-RateLimit-Limit"} {
			if _, ok := tc.want[k]; !ok && res.h.Get(k) != "" {
				t.Errorf("%v wrote %s", tc.f, k)
			}
		}
	}
}

func TestCostAndDeniedHandler(t *testing.T) {
	clk := newFakeClock()
	var denial *httplimit.Denial
	ts := serve(t, httplimit.Options{
		Policies: []httplimit.Policy{{Name: "bytes", Limit: limit.TokenBucket(10, limit.PerSecond(1))}},
		Store:    memStore(t, clk), Now: clk.Now,
		Cost: httplimit.CostHeader("X-Cost", 1),
		DeniedHandler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			denial, _ = httplimit.DenialFromContext(r.Context())
			w.WriteHeader(http.StatusTeapot)
		}),
	})
	for i, want := range []int{200, 200, 418} {
		if res := get(t, ts, "X-Cost", "4"); res.code != want {
			t.Errorf("request %d of cost 4: %d, want %d", i, res.code, want)
		}
	}
	if denial == nil || len(denial.Policies) != 1 || denial.Policies[0] != "bytes" || denial.RetryAfter != 2*time.Second {
		t.Errorf("denial %+v, want bytes with 2 s to wait", denial)
	}
	// A cost above the capacity is never admitted: no Retry-After.
	res := get(t, ts, "X-Cost", "11")
	if res.code != 418 || res.h.Get("Retry-After") != "" || denial.RetryAfter != 0 {
		t.Errorf("cost over capacity: %d, Retry-After %q, denial %+v", res.code, res.h.Get("Retry-After"), denial)
	}
}

func TestConfigErrors(t *testing.T) {
	store := memStore(t, newFakeClock())
	good := httplimit.Policy{Name: "p", Limit: limit.FixedWindow(1, time.Second)}
	for name, opts := range map[string]httplimit.Options{
		"no policies":       {Store: store},
		"no store":          {Policies: []httplimit.Policy{good}},
		"bad name":          {Store: store, Policies: []httplimit.Policy{{Name: "é", Limit: good.Limit}}},
		"duplicate name":    {Store: store, Policies: []httplimit.Policy{good, good}},
		"bad limit":         {Store: store, Policies: []httplimit.Policy{{Name: "p", Limit: limit.FixedWindow(0, time.Second)}}},
		"unknown fail mode": {Store: store, Policies: []httplimit.Policy{good}, OnStoreError: 7},
		"negative replicas": {Store: store, Policies: []httplimit.Policy{good}, FallbackReplicas: -1},
		"bad prefix":        {Store: store, Policies: []httplimit.Policy{good}, ClientIP: &httplimit.ClientIP{IPv6Prefix: 200}},
	} {
		_, err := httplimit.New(opts)
		if _, ok := err.(*httplimit.ConfigError); !ok {
			t.Errorf("%s: err %v, want *ConfigError", name, err)
		}
	}
}

// Concurrent requests of one client never get more than the limit
// admitted, and no fewer: the policies are decided atomically.
func TestConcurrentRequestsAdmitExactlyTheLimit(t *testing.T) {
	clk := newFakeClock()
	ts := serve(t, httplimit.Options{
		Policies: []httplimit.Policy{
			{Name: "per-ip", Limit: limit.FixedWindow(50, time.Minute)},
			{Name: "global", Limit: limit.FixedWindow(1000, time.Minute), Key: httplimit.KeyConst("all")},
		},
		Store: memStore(t, clk), Now: clk.Now,
	})
	const workers, each = 16, 8
	codes := make(chan int, workers*each)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				res, err := ts.Client().Get(ts.URL + "/")
				if err != nil {
					t.Error(err)
					return
				}
				res.Body.Close()
				codes <- res.StatusCode
			}
		}()
	}
	wg.Wait()
	close(codes)
	admitted := 0
	for c := range codes {
		if c == 200 {
			admitted++
		}
	}
	if admitted != 50 {
		t.Errorf("%d of %d concurrent requests admitted, want exactly 50", admitted, workers*each)
	}
}
