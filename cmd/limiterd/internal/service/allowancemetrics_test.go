package service

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/uuid"

	ratelimiterv1 "github.com/costwise/batcher/api/ratelimiter/v1"
	"github.com/costwise/batcher/envoyrl"
	"github.com/costwise/batcher/envoyrl/redisstore"
	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/limit/redislimit"
)

// allowanceMetricsRules give the Envoy API's hot descriptor a limit the
// tests stay under.
const allowanceMetricsRules = `
domain: gw
descriptors:
  - key: k
    value: hot
    rate_limit: {unit: hour, requests_per_unit: 1000000}
`

// allowanceSeries are the series limiterd_allowance_* give a store.
func allowanceSeries(store string) []string {
	l := `store="` + store + `"`
	return []string{
		`limiterd_allowance_decisions_total{path="local",` + l + `}`,
		`limiterd_allowance_decisions_total{path="redis",` + l + `}`,
		`limiterd_allowance_takes_total{` + l + `}`,
		`limiterd_allowance_units_total{kind="expired",` + l + `}`,
		`limiterd_allowance_units_total{kind="lent",` + l + `}`,
		`limiterd_allowance_units_total{kind="returned",` + l + `}`,
	}
}

// allowanceValues reads a store's allowance series from a /metrics text,
// in allowanceSeries' order, failing the test when one is missing.
func allowanceValues(t *testing.T, m, store string) (local, redis, takes, expired, lent, returned float64) {
	t.Helper()
	var v [6]float64
	for i, s := range allowanceSeries(store) {
		v[i] = gaugeOf(t, m, s)
	}
	return v[0], v[1], v[2], v[3], v[4], v[5]
}

// TestAllowanceMetrics runs limiterd on a Redis of its own with
// backends.redis.local_allowance off and on. On, every allowance series of
// both stores is in /metrics at 0 from the start; once a key is hot on
// each API, each store's decisions by path add up to the calls made, some
// of them local, and no more units are back or lost than were lent. Off,
// or on the memory store, there is none.
func TestAllowanceMetrics(t *testing.T) {
	skipWithColdLeases(t, "a keyed key is decided from its cold lease before it turns hot")
	srv := redistest.StartServer(t)
	dir := t.TempDir()
	writeFile(t, dir, "ex.yaml", allowanceMetricsRules)
	const algo = "use_algo: token_bucket\nalgo_settings: {capacity: 100000, rate: 1}\n"
	for _, c := range []struct {
		name, config string
		on           bool
	}{
		{"off", fmt.Sprintf("store: redis\nbackends:\n  redis: {addr: %q, local_allowance: false}\n", srv.Addr()), false},
		{"memory", "store: in_memory\nbackends:\n  redis: {local_allowance: true}\n", false},
		{"on", fmt.Sprintf("store: redis\nbackends:\n  redis: {addr: %q, local_allowance: true}\n", srv.Addr()), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := start(t, c.config+algo, "--rules", dir)
			m := p.metricsText()
			if !c.on {
				p.driveAllowanceAPIs(t, 20)
				if m += p.metricsText(); strings.Contains(m, "limiterd_allowance_") {
					t.Fatalf("allowance series without allowances:\n%s", grepLines(m, "limiterd_allowance_"))
				}
				return
			}
			for _, store := range []string{"keyed", "envoy"} {
				for _, s := range allowanceSeries(store) {
					if v := gaugeOf(t, m, s); v != 0 {
						t.Errorf("%s %v at start, want 0", s, v)
					}
				}
			}
			for _, name := range []string{"decisions", "takes", "units"} {
				if !strings.Contains(m, "# TYPE limiterd_allowance_"+name+"_total counter\n") {
					t.Errorf("limiterd_allowance_%s_total is not a counter:\n%s", name, grepLines(m, "limiterd_allowance_"))
				}
			}
			keyed, envoy := p.driveAllowanceAPIs(t, 0)
			m = p.metricsText()
			for store, calls := range map[string]int{"keyed": keyed, "envoy": envoy} {
				local, redis, takes, expired, lent, returned := allowanceValues(t, m, store)
				t.Logf("%s: %d calls; decisions local %v, redis %v; takes %v; units lent %v, returned %v, expired %v",
					store, calls, local, redis, takes, lent, returned, expired)
				if local+redis != float64(calls) {
					t.Errorf("%s: %v local + %v redis decisions, want the %d calls made", store, local, redis, calls)
				}
				if local == 0 || takes == 0 || lent == 0 {
					t.Errorf("%s: %v local decisions, %v takes, %v units lent after the key turned hot", store, local, takes, lent)
				}
				if returned+expired > lent {
					t.Errorf("%s: %v units returned and %v expired, more than the %v lent", store, returned, expired, lent)
				}
			}
		})
	}
}

// driveAllowanceAPIs decides one key on the keyed APIs (POST /limit and
// ratelimiter.v1 in turn) and one descriptor on the Envoy API, n calls
// each, or with n 0 until /metrics shows local decisions of both stores
// (failing the test after 30 s). It returns the calls made on each.
func (p *proc) driveAllowanceAPIs(t *testing.T, n int) (keyed, envoy int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := &http.Client{Timeout: 5 * time.Second}
	grpcKeyed := ratelimiterv1.NewRateLimiterClient(dial(t, p.grpc))
	grpcEnvoy := rlsv3.NewRateLimitServiceClient(dial(t, p.grpc))
	key := uuid.NewString()
	hot := func(store string) bool {
		m := p.metricsText()
		local := `limiterd_allowance_decisions_total{path="local",store="` + store + `"} `
		return strings.Contains(m, local) && !strings.Contains(m, local+"0\n")
	}
	for keyedHot, envoyHot := false, false; n == 0 && !(keyedHot && envoyHot) || n > 0 && keyed < n; {
		if ctx.Err() != nil {
			t.Fatalf("no local decision within 30 s: keyed %v after %d calls, envoy %v after %d", keyedHot, keyed, envoyHot, envoy)
		}
		for range 50 {
			if keyed%2 == 0 {
				p.postLimitOK(ctx, t, client, key)
			} else if r, err := grpcKeyed.Allow(ctx, &ratelimiterv1.AllowRequest{Key: key}); err != nil || !r.Allowed {
				t.Fatalf("ratelimiter.v1 Allow: %v %v", r, err)
			}
			keyed++
			if _, err := grpcEnvoy.ShouldRateLimit(ctx, envoyReq("k", "hot")); err != nil {
				t.Fatalf("ShouldRateLimit: %v", err)
			}
			envoy++
		}
		if n == 0 {
			keyedHot, envoyHot = hot("keyed"), hot("envoy")
		}
	}
	return keyed, envoy
}

// postLimitOK calls POST /limit for key, failing the test unless it is
// allowed.
func (p *proc) postLimitOK(ctx context.Context, t *testing.T, client *http.Client, key string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.http+"/limit", nil)
	req.Header.Set("X-Client-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /limit: %d", resp.StatusCode)
	}
}

// TestAllowanceSeriesReadTheStores: limiterd_allowance_* are each store's
// AllowanceStats at the scrape, under one set of names: redislimit's
// Renewals are the takes and its Expired the expired units; redisstore's
// Forfeited are the expired units, and its decisions by Redis its
// one-trip ones and its takes.
func TestAllowanceSeriesReadTheStores(t *testing.T) {
	srv := redistest.StartServer(t)
	clock := limittest.NewClock(time.Now().Truncate(time.Hour).Add(time.Minute))
	ks, err := redislimit.New(srv.Client(t), redislimit.Options{Prefix: "series", Clock: clock, LocalAllowance: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ks.Close(context.Background()) })
	es := redisstore.New(srv.Client(t), redisstore.Options{LocalAllowance: true, Now: clock.Now})
	t.Cleanup(func() { es.Close() })
	rules, err := envoyrl.Parse([]envoyrl.File{{Name: "r.yaml", Content: []byte(allowanceMetricsRules)}})
	if err != nil {
		t.Fatal(err)
	}
	svc := envoyrl.NewService(es, envoyrl.Options{Now: clock.Now})
	svc.SetRules(rules)
	m := newMetrics(100)
	m.allowances("keyed", keyedAllowanceCounts(ks, tokenScale))
	m.allowances("envoy", envoyAllowanceCounts(es))
	p := limit.TokenBucket(100000*tokenScale, limit.PerSecond(tokenScale)).Named("tb")
	for range 200 { // 2 s, 10 decisions per 10 ms on each store
		for range 10 {
			if _, err := ks.AllowN(context.Background(), "k", p, tokenScale); err != nil {
				t.Fatal(err)
			}
			if _, err := svc.ShouldRateLimit(context.Background(), envoyReq("k", "hot")); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(10 * time.Millisecond)
	}
	// The next window forfeits what the Envoy store holds of this one.
	clock.Advance(time.Hour)
	for range 10 {
		if _, err := svc.ShouldRateLimit(context.Background(), envoyReq("k", "hot")); err != nil {
			t.Fatal(err)
		}
	}
	// The keyed store's renewal goroutine may move its counts during a
	// scrape: compare a scrape with counts that did not move across it.
	for range 100 {
		k, e := ks.AllowanceStats(), es.AllowanceStats()
		got := gatherAllowances(t, m)
		if k != ks.AllowanceStats() || e != es.AllowanceStats() {
			continue
		}
		if k.Local == 0 || e.Local == 0 || e.Forfeited == 0 {
			t.Fatalf("keyed %+v, envoy %+v: want local decisions, and envoy units forfeited", k, e)
		}
		want := map[string]float64{}
		for store, v := range map[string][6]float64{
			"keyed": {float64(k.Local), float64(k.Remote), float64(k.Renewals), float64(k.Expired) / tokenScale, float64(k.Lent) / tokenScale, float64(k.Returned) / tokenScale},
			"envoy": {float64(e.Local), float64(e.Remote + e.Takes), float64(e.Takes), float64(e.Forfeited), float64(e.Lent), float64(e.Returned)},
		} {
			for i, s := range allowanceSeries(store) {
				want[s] = v[i]
			}
		}
		for s, v := range want {
			if got[s] != v {
				t.Errorf("%s %v, want %v (keyed %+v, envoy %+v)", s, got[s], v, k, e)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%d allowance series, want %d: %v", len(got), len(want), got)
		}
		return
	}
	t.Fatal("the stores' counts moved during every scrape")
}

// gatherAllowances scrapes m's limiterd_allowance_* series, named as in
// /metrics.
func gatherAllowances(t *testing.T, m *metrics) map[string]float64 {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "limiterd_allowance_") {
			continue
		}
		for _, s := range mf.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			got[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = s.GetCounter().GetValue()
		}
	}
	return got
}

// TestColdLeaseInLimiterd: with backends.redis.cold_lease, keys decided a
// few times each on POST /limit (never hot) are answered locally after
// their first decision, which took a cold lease along; without it every
// one of those decisions is a call to Redis.
func TestColdLeaseInLimiterd(t *testing.T) {
	skipWithColdLeases(t, "its stores without cold leases get them")
	srv := redistest.StartServer(t)
	const algo = "use_algo: token_bucket\nalgo_settings: {capacity: 100000, rate: 1}\n"
	for _, c := range []struct {
		name, redis string
		local       bool
	}{
		{"hot keys only", "local_allowance: true", false},
		{"cold leases", "local_allowance: true, cold_lease: 1m", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := start(t, fmt.Sprintf("store: redis\nbackends:\n  redis: {addr: %q, %s}\n", srv.Addr(), c.redis)+algo)
			client := &http.Client{Timeout: 5 * time.Second}
			const keys, each = 20, 3
			for i := range keys * each {
				p.postLimitOK(context.Background(), t, client, fmt.Sprintf("%s-%d", c.name, i%keys))
			}
			local, redis, _, _, lent, _ := allowanceValues(t, p.metricsText(), "keyed")
			t.Logf("decisions local %v, redis %v; units lent %v", local, redis, lent)
			if local+redis != keys*each {
				t.Fatalf("%v local + %v redis decisions, want the %d calls made", local, redis, keys*each)
			}
			if want := float64(keys * (each - 1)); c.local && (local != want || redis != keys) {
				t.Fatalf("%v local, %v by Redis: want %v local (all but each key's first), %d by Redis", local, redis, want, keys)
			}
			if !c.local && local != 0 {
				t.Fatalf("%v local decisions on keys decided 3 times each, want 0 without cold leases", local)
			}
		})
	}
}
