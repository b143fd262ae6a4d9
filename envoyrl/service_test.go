package envoyrl

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const serviceRules = `
domain: svc
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: p/*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: free
    rate_limit: {unlimited: true}
  - key: generic
    rate_limit: {unit: hour, requests_per_unit: 100, name: generic}
  - key: specific
    rate_limit: {unit: hour, requests_per_unit: 1, replaces: [{name: generic}]}
`

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(unix int64) { c.mu.Lock(); c.t = time.Unix(unix, 0); c.mu.Unlock() }

func newTestService(t *testing.T, opts Options) (*Service, *clock) {
	t.Helper()
	clk := &clock{t: time.Unix(1_000_040, 0)} // 20 s into a minute window
	store, err := NewMemoryStore(MemoryOptions{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	opts.Now = clk.Now
	s := NewService(store, opts)
	s.SetRules(mustRules(t, serviceRules))
	return s, clk
}

func request(hits uint32, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "svc", Descriptors: ds, HitsAddend: hits}
}

// short is a status as the tables write it.
type short struct {
	code      rlsv3.RateLimitResponse_Code
	remaining uint32
	reset     int64 // seconds; -1: no duration
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

func decide(t *testing.T, s *Service, req *rlsv3.RateLimitRequest) (rlsv3.RateLimitResponse_Code, []short) {
	t.Helper()
	resp, err := s.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]short, len(resp.Statuses))
	for i, st := range resp.Statuses {
		out[i] = short{st.Code, st.LimitRemaining, -1}
		if st.DurationUntilReset != nil {
			out[i].reset = st.DurationUntilReset.Seconds
		}
	}
	return resp.OverallCode, out
}

func expect(t *testing.T, s *Service, req *rlsv3.RateLimitRequest, overall rlsv3.RateLimitResponse_Code, want ...short) {
	t.Helper()
	got, sts := decide(t, s, req)
	if got != overall {
		t.Errorf("overall %v, want %v (statuses %v)", got, overall, sts)
	}
	if len(sts) != len(want) {
		t.Fatalf("%d statuses, want %d", len(sts), len(want))
	}
	for i := range want {
		if sts[i] != want[i] {
			t.Errorf("status %d: %+v, want %+v", i, sts[i], want[i])
		}
	}
}

func TestFixedWindowAlignedToUnit(t *testing.T) {
	s, clk := newTestService(t, Options{})
	alice := desc("user", "alice")
	expect(t, s, request(0, alice), ok, short{ok, 2, 40})
	clk.Set(1_000_050)
	expect(t, s, request(0, alice), ok, short{ok, 1, 30})
	expect(t, s, request(0, alice), ok, short{ok, 0, 30})
	expect(t, s, request(0, alice), over, short{over, 0, 30})
	// Each value of a key-only rule has its own counter.
	expect(t, s, request(0, desc("user", "bob")), ok, short{ok, 2, 30})
	clk.Set(1_000_079) // the last second of the window
	expect(t, s, request(0, alice), over, short{over, 0, 1})
	clk.Set(1_000_080) // a new window starts at a multiple of 60
	expect(t, s, request(0, alice), ok, short{ok, 2, 60})
}

func TestHitsAddend(t *testing.T) {
	s, _ := newTestService(t, Options{})
	expect(t, s, request(2, desc("tenant", "t")), ok, short{ok, 3, 40})
	d := desc("tenant", "t")
	d.HitsAddend = wrapperspb.UInt64(0) // the descriptor's own 0 only looks
	expect(t, s, request(5, d), ok, short{ok, 3, 40})
	expect(t, s, request(4, desc("tenant", "t")), over, short{over, 0, 40})
}

func TestEveryDescriptorCountedByDefault(t *testing.T) {
	s, _ := newTestService(t, Options{})
	for range 3 {
		decide(t, s, request(0, desc("user", "u")))
	}
	// user is over; tenant is counted all the same.
	expect(t, s, request(0, desc("user", "u"), desc("tenant", "t")), over, short{over, 0, 40}, short{ok, 4, 40})
	expect(t, s, request(0, desc("user", "u"), desc("tenant", "t")), over, short{over, 0, 40}, short{ok, 3, 40})
}

func TestStopIncrementWhenOverLimit(t *testing.T) {
	s, _ := newTestService(t, Options{StopIncrementWhenOverLimit: true})
	for range 3 {
		decide(t, s, request(0, desc("user", "u")))
	}
	// user would go over: only it is counted, tenant stays at 0.
	expect(t, s, request(0, desc("user", "u"), desc("tenant", "t")), over, short{over, 0, 40}, short{ok, 5, 40})
	expect(t, s, request(0, desc("user", "u"), desc("tenant", "t")), over, short{over, 0, 40}, short{ok, 5, 40})
	expect(t, s, request(0, desc("tenant", "t")), ok, short{ok, 4, 40})
}

func TestShadowMode(t *testing.T) {
	s, _ := newTestService(t, Options{})
	expect(t, s, request(0, desc("shadow", "x")), ok, short{ok, 0, 1})
	expect(t, s, request(0, desc("shadow", "x")), ok, short{ok, 0, 1})
	g, _ := newTestService(t, Options{ShadowMode: true})
	for range 3 {
		decide(t, g, request(0, desc("user", "u")))
	}
	expect(t, g, request(0, desc("user", "u")), ok, short{over, 0, 40})
}

func TestShareThreshold(t *testing.T) {
	s, _ := newTestService(t, Options{})
	expect(t, s, request(0, desc("files", "files/a")), ok, short{ok, 1, 40})
	expect(t, s, request(0, desc("files", "files/b")), ok, short{ok, 0, 40})
	expect(t, s, request(0, desc("files", "files/c")), over, short{over, 0, 40})
	// Without share_threshold each value matching the wildcard counts apart.
	expect(t, s, request(0, desc("path", "p/a")), ok, short{ok, 1, 40})
	expect(t, s, request(0, desc("path", "p/b")), ok, short{ok, 1, 40})
}

func TestUnlimitedReplacesAndNoRule(t *testing.T) {
	s, _ := newTestService(t, Options{})
	expect(t, s, request(0, desc("free", "x"), desc("nothing", "y")), ok,
		short{ok, math.MaxUint32, -1}, short{ok, 0, -1})
	// specific replaces generic: generic is not counted nor reported.
	expect(t, s, request(0, desc("generic", "g"), desc("specific", "s")), ok, short{ok, 0, -1}, short{ok, 0, 760})
	expect(t, s, request(0, desc("generic", "g")), ok, short{ok, 99, 760})
	resp, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "unknown", Descriptors: []*rlv3.RateLimitDescriptor{desc("a", "b")}})
	if err != nil || resp.OverallCode != ok {
		t.Fatalf("unknown domain: %v %v", resp, err)
	}
}

func TestBadRequests(t *testing.T) {
	s, _ := newTestService(t, Options{})
	for _, req := range []*rlsv3.RateLimitRequest{
		{Descriptors: []*rlv3.RateLimitDescriptor{desc("a", "b")}},
		{Domain: "svc"},
	} {
		if _, err := s.ShouldRateLimit(context.Background(), req); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%v: error %v, want ErrBadRequest", req, err)
		}
	}
}

func TestMemoryStoreConcurrentCountsExactly(t *testing.T) {
	s, _ := newTestService(t, Options{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	okCount := 0
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				resp, err := s.ShouldRateLimit(context.Background(), request(0, desc("tenant", "hot")))
				if err != nil {
					t.Error(err)
					return
				}
				if resp.OverallCode == ok {
					mu.Lock()
					okCount++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if okCount != 5 {
		t.Fatalf("%d requests admitted, want exactly 5", okCount)
	}
}

func TestMemoryStoreSweepDropsExpired(t *testing.T) {
	clk := &clock{t: time.Unix(100, 0)}
	m, err := NewMemoryStore(MemoryOptions{Shards: 4, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cs := []Counter{{Key: "a", Hits: 1, TTL: time.Second}, {Key: "b", Hits: 2, TTL: time.Minute}}
	if err := m.Add(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	clk.Set(102)
	m.Sweep()
	if m.Len() != 1 {
		t.Fatalf("%d counters after sweep, want 1", m.Len())
	}
	if _, err := NewMemoryStore(MemoryOptions{Shards: 3}); err == nil {
		t.Fatal("3 shards accepted")
	}
}

// A rule with quota_mode is counted and reported but not enforced, as in
// envoyproxy/ratelimit: past its limit the descriptor is OK, with its
// current_limit, nothing remaining and no reset, and the answer stays OK;
// beside a descriptor over an enforced limit the answer is OVER_LIMIT.
func TestQuotaModeReportsWithoutEnforcing(t *testing.T) {
	clk := &clock{t: time.Unix(1_000_040, 0)}
	store, err := NewMemoryStore(MemoryOptions{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	s := NewService(store, Options{Now: clk.Now})
	s.SetRules(mustRules(t, "domain: svc\ndescriptors:\n"+
		"  - key: q\n    quota_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"+
		"  - key: hard\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"))
	first, err := s.ShouldRateLimit(context.Background(), request(0, desc("q", "x")))
	if err != nil || first.OverallCode != ok || first.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("first: %v, %v", first, err)
	}
	for range 2 {
		resp, err := s.ShouldRateLimit(context.Background(), request(0, desc("q", "x")))
		if err != nil {
			t.Fatal(err)
		}
		st := resp.Statuses[0]
		if resp.OverallCode != ok || st.Code != ok || st.CurrentLimit.GetRequestsPerUnit() != 1 || st.LimitRemaining != 0 || st.DurationUntilReset != nil {
			t.Fatalf("over a quota_mode limit: %v; want OK overall and for the descriptor, its limit, 0 remaining, no reset", resp)
		}
	}
	expect(t, s, request(0, desc("hard", "y")), ok, short{ok, 0, 40})
	resp, err := s.ShouldRateLimit(context.Background(), request(0, desc("q", "x"), desc("hard", "y")))
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != ok ||
		resp.Statuses[1].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("quota_mode beside an enforced limit over: %v, %v; want OVER_LIMIT overall, the quota descriptor OK", resp, err)
	}
}
