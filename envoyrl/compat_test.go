package envoyrl

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

const compatRules = `
domain: c
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: s
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: h
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: free
    rate_limit: {unlimited: true}
`

// statsRecorder sums what a StatsObserver receives.
type statsRecorder struct {
	mu     sync.Mutex
	stats  map[string]LimitStats
	shadow int
	bad    int
}

func (r *statsRecorder) Descriptor(string, string, string) {}
func (r *statsRecorder) StoreError(error)                  {}
func (r *statsRecorder) GlobalShadowMode()                 { r.mu.Lock(); r.shadow++; r.mu.Unlock() }
func (r *statsRecorder) BadRequest()                       { r.mu.Lock(); r.bad++; r.mu.Unlock() }
func (r *statsRecorder) Limit(domain, rule string, st LimitStats) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stats == nil {
		r.stats = map[string]LimitStats{}
	}
	s := r.stats[rule]
	s.TotalHits += st.TotalHits
	s.WithinLimit += st.WithinLimit
	s.NearLimit += st.NearLimit
	s.OverLimit += st.OverLimit
	s.OverLimitWithLocalCache += st.OverLimitWithLocalCache
	s.ShadowMode += st.ShadowMode
	r.stats[rule] = s
}

func (r *statsRecorder) get(rule string) LimitStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats[rule]
}

// countingStore counts the calls that reach a store.
type countingStore struct {
	Store
	adds atomic.Int64
}

func (c *countingStore) Add(ctx context.Context, counters []Counter) error {
	c.adds.Add(1)
	return c.Store.Add(ctx, counters)
}

func newCompatService(t *testing.T, opts Options) (*Service, *countingStore, *clock, *statsRecorder) {
	t.Helper()
	clk := &clock{}
	clk.Set(1_000_020) // 0 s into a minute window
	mem, err := NewMemoryStore(MemoryOptions{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	store := &countingStore{Store: mem}
	rec := &statsRecorder{}
	opts.Now, opts.Observer = clk.Now, rec
	s := NewService(store, opts)
	s.SetRules(mustRules(t, compatRules))
	return s, store, clk, rec
}

// TestLimitStatsAsRatelimitCounts drives hits_addend across the near and
// over thresholds: a limit of 10 at the default ratio 0.8 is near past 8.
func TestLimitStatsAsRatelimitCounts(t *testing.T) {
	s, _, _, rec := newCompatService(t, Options{})
	steps := []struct {
		hits uint32
		code rlsv3.RateLimitResponse_Code
		add  LimitStats
	}{
		{5, ok, LimitStats{TotalHits: 5, WithinLimit: 5}},               // 0 -> 5
		{4, ok, LimitStats{TotalHits: 4, WithinLimit: 4, NearLimit: 1}}, // 5 -> 9: 9 is past 8
		{3, over, LimitStats{TotalHits: 3, OverLimit: 2, NearLimit: 1}}, // 9 -> 12: 10 near, 11 and 12 over
		{2, over, LimitStats{TotalHits: 2, OverLimit: 2}},               // 12 -> 14: all over
		{0, over, LimitStats{}},                                         // request hits_addend 0 means 1
		{1, over, LimitStats{TotalHits: 1, OverLimit: 1}},               // 15 -> 16
	}
	var want LimitStats
	for i, st := range steps {
		code, _ := decide(t, s, creq(st.hits, desc("k", "x")))
		if code != st.code {
			t.Fatalf("step %d: %v, want %v", i, code, st.code)
		}
		if i == 4 {
			st.add = LimitStats{TotalHits: 1, OverLimit: 1}
		}
		want.TotalHits += st.add.TotalHits
		want.WithinLimit += st.add.WithinLimit
		want.NearLimit += st.add.NearLimit
		want.OverLimit += st.add.OverLimit
		if got := rec.get("c.k"); got != want {
			t.Fatalf("step %d: %+v, want %+v", i, got, want)
		}
	}
	// A shadow_mode limit of 2 (near past 1): of 3 hits at once the
	// second is near and the third over, in shadow mode; the answer is OK.
	expect(t, s, creq(3, desc("s", "x")), ok, short{ok, 0, 60})
	if got, want := rec.get("c.s"), (LimitStats{TotalHits: 3, NearLimit: 1, OverLimit: 1, ShadowMode: 1}); got != want {
		t.Fatalf("shadow: %+v, want %+v", got, want)
	}
	// Unlimited descriptors are not counted.
	expect(t, s, creq(1, desc("free", "x")), ok, short{ok, math32, -1})
	if got := rec.get("c.free"); got != (LimitStats{}) {
		t.Fatalf("unlimited: %+v, want nothing", got)
	}
}

const math32 = 1<<32 - 1

func creq(hits uint32, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "c", Descriptors: ds, HitsAddend: hits}
}

func TestNearLimitRatio(t *testing.T) {
	for _, tc := range []struct {
		ratio float64
		near  uint64
	}{{0.5, 4}, {-1, 9}, {1, 0}} {
		s, _, _, rec := newCompatService(t, Options{NearLimitRatio: tc.ratio})
		decide(t, s, creq(9, desc("k", "x")))
		if got := rec.get("c.k").NearLimit; got != tc.near {
			t.Errorf("ratio %v: 9 hits of 10 gave near %d, want %d", tc.ratio, got, tc.near)
		}
	}
}

func TestGlobalShadowModeAndBadRequestsReported(t *testing.T) {
	s, _, _, rec := newCompatService(t, Options{ShadowMode: true})
	expect(t, s, creq(11, desc("k", "x")), ok, short{over, 0, 60})
	if _, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "c"}); err == nil {
		t.Fatal("no descriptors: no error")
	}
	if rec.shadow != 1 || rec.bad != 1 {
		t.Fatalf("global shadow %d, bad requests %d; want 1 and 1", rec.shadow, rec.bad)
	}
}

// TestResponseHeaders: the last descriptor over its limit, else the first
// with the least remaining, gives the three headers.
func TestResponseHeaders(t *testing.T) {
	s, _, clk, _ := newCompatService(t, Options{ResponseHeaders: &ResponseHeaders{Limit: "L", Remaining: "R", Reset: "T"}})
	clk.Set(1_000_020 + 15) // 15 s into the minute, 2,175 s into the hour
	headers := func(req *rlsv3.RateLimitRequest) string {
		t.Helper()
		resp, err := s.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, h := range resp.ResponseHeadersToAdd {
			out = append(out, h.Key+"="+h.Value)
		}
		return strings.Join(out, " ")
	}
	resetHour := fmt.Sprint(3600 - (1_000_035 % 3600))
	// k: 10 - 1 = 9 left; h: 5 - 1 = 4 left: h shows.
	if got, want := headers(creq(1, desc("k", "a"), desc("h", "a"))), "L=5 R=4 T="+resetHour; got != want {
		t.Fatalf("least remaining: %q, want %q", got, want)
	}
	if got, want := headers(creq(5, desc("k", "b"))), "L=10 R=5 T=45"; got != want {
		t.Fatalf("one descriptor: %q, want %q", got, want)
	}
	// k: 4 left, h: 4 left: the first shows.
	if got, want := headers(creq(1, desc("k", "b"), desc("h", "b"))), "L=10 R=4 T=45"; got != want {
		t.Fatalf("first of the least: %q, want %q", got, want)
	}
	// Both over: the last over shows with 0 left.
	if got, want := headers(creq(6, desc("h", "d"), desc("k", "b"), desc("free", "x"))), "L=10 R=0 T=45"; got != want {
		t.Fatalf("over: %q, want %q", got, want)
	}
	// No limit at all: no headers.
	if got := headers(creq(1, desc("free", "x"), desc("nothing", "x"))); got != "" {
		t.Fatalf("no limit: %q, want none", got)
	}
}

// TestLocalCache: a counter over its limit is answered from the local
// cache, without the store, until its window ends.
func TestLocalCache(t *testing.T) {
	s, store, clk, rec := newCompatService(t, Options{LocalCacheBytes: 1 << 20})
	expect(t, s, creq(10, desc("k", "x")), ok, short{ok, 0, 60})
	expect(t, s, creq(1, desc("k", "x")), over, short{over, 0, 60})
	calls := store.adds.Load()
	clk.Set(1_000_020 + 30)
	expect(t, s, creq(2, desc("k", "x")), over, short{over, 0, 30})
	if n := store.adds.Load(); n != calls {
		t.Fatalf("%d store calls for a cached counter, want none", n-calls)
	}
	if got, want := rec.get("c.k"), (LimitStats{TotalHits: 13, WithinLimit: 10, NearLimit: 2, OverLimit: 3, OverLimitWithLocalCache: 2}); got != want {
		t.Fatalf("stats %+v, want %+v", got, want)
	}
	// Another descriptor of the same request still reaches the store.
	expect(t, s, creq(1, desc("k", "x"), desc("h", "x")), over, short{over, 0, 30}, short{ok, 4, 3600 - (1_000_050 % 3600)})
	if n := store.adds.Load(); n != calls+1 {
		t.Fatalf("%d store calls for a request with an uncached counter, want 1", n-calls)
	}
	// The next window starts afresh.
	clk.Set(1_000_020 + 60)
	expect(t, s, creq(1, desc("k", "x")), ok, short{ok, 9, 60})
	if n := store.adds.Load(); n != calls+2 {
		t.Fatalf("the next window: %d store calls, want 1", n-calls-1)
	}
}

// TestLocalCacheStopIncrement: with StopIncrementWhenOverLimit, a request
// with a cached counter only reads the others.
func TestLocalCacheStopIncrement(t *testing.T) {
	s, _, _, _ := newCompatService(t, Options{LocalCacheBytes: 1 << 20, StopIncrementWhenOverLimit: true})
	expect(t, s, creq(10, desc("k", "x")), ok, short{ok, 0, 60})
	expect(t, s, creq(1, desc("k", "x")), over, short{over, 0, 60})
	expect(t, s, creq(1, desc("k", "x"), desc("h", "y")), over, short{over, 0, 60}, short{ok, 5, 3600 - 1_000_020%3600})
	expect(t, s, creq(1, desc("h", "y")), ok, short{ok, 4, 3600 - 1_000_020%3600})
}

func TestOverCacheBounded(t *testing.T) {
	c := newOverCache(16 * 1024)
	for i := range 10_000 {
		c.add(fmt.Sprintf("key-%06d", i), 100)
	}
	// 1 KiB a shard, 10 + 112 bytes a key: 8 keys a shard.
	if n := c.len(); n != 16*8 {
		t.Fatalf("%d keys held in 16 KiB, want 128", n)
	}
	if !c.over("key-009999", 99) || c.over("key-009999", 100) || c.over("key-000000", 0) {
		t.Fatal("the newest key is not held until its end, or the oldest was kept")
	}
	if newOverCache(0) != nil {
		t.Fatal("a cache of 0 bytes")
	}
	small := newOverCache(16) // 1 byte a shard: nothing fits
	small.add("k", 100)
	if small.over("k", 0) {
		t.Fatal("a key larger than the budget was kept")
	}
}

func TestMergeDomainsAndDump(t *testing.T) {
	files := []File{
		{Name: "a.yaml", Content: []byte("domain: m\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n")},
		{Name: "b.yaml", Content: []byte("domain: m\ndescriptors:\n  - key: b\n    value: v\n    shadow_mode: true\n    quota_mode: true\n    rate_limit: {unit: hour, requests_per_unit: 2}\n  - key: u\n    rate_limit: {unlimited: true}\n")},
	}
	if _, err := Parse(files); err == nil || !strings.Contains(err.Error(), "b.yaml: duplicate domain 'm'") {
		t.Fatalf("without merging: %v", err)
	}
	r, err := ParseWith(files, ParseOptions{MergeDomains: true})
	if err != nil {
		t.Fatal(err)
	}
	if m := r.Match("m", desc("b", "v")); m.Limit == nil || m.Limit.Proto.RequestsPerUnit != 2 || m.Limit.Domain != "m" {
		t.Fatalf("the second file's rule: %+v", m)
	}
	if m := r.Match("m", desc("a", "z")); m.Limit == nil || m.Limit.Proto.RequestsPerUnit != 1 {
		t.Fatalf("the first file's rule: %+v", m)
	}
	want := "m.a: unit=SECOND requests_per_unit=1, shadow_mode: false, quota_mode: false\n" +
		"m.b_v: unit=HOUR requests_per_unit=2, shadow_mode: true, quota_mode: true\n" +
		"m.u: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n"
	if got := r.Dump(); got != want {
		t.Fatalf("dump:\n%s\nwant:\n%s", got, want)
	}
	// A key defined in two files of one domain is still refused.
	files = append(files, File{Name: "c.yaml", Content: []byte("domain: m\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")})
	if _, err := ParseWith(files, ParseOptions{MergeDomains: true}); err == nil ||
		!strings.Contains(err.Error(), "c.yaml: duplicate descriptor composite key 'm.a'") {
		t.Fatalf("a key in two files: %v", err)
	}
}
