package envoyrl

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// flakyStore fails while down is set, and counts on a memory store
// otherwise.
type flakyStore struct {
	Store
	down  atomic.Bool
	calls atomic.Int64
}

var errDown = errors.New("store down")

func (f *flakyStore) Add(ctx context.Context, cs []Counter) error {
	f.calls.Add(1)
	if f.down.Load() {
		return errDown
	}
	return f.Store.Add(ctx, cs)
}

func (f *flakyStore) Get(ctx context.Context, cs []Counter) error {
	f.calls.Add(1)
	if f.down.Load() {
		return errDown
	}
	return f.Store.Get(ctx, cs)
}

// TestFallbackDividesLimit checks that while the primary fails the local
// store admits the limit divided by the replicas (user: 3 a minute over 3
// replicas, 1 each), that each failure is reported and the primary left
// alone for Probe, and that the primary counts again afterwards.
func TestFallbackDividesLimit(t *testing.T) {
	clk := &clock{t: time.Unix(1_000_040, 0)}
	mem := func() Store {
		s, err := NewMemoryStore(MemoryOptions{Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	primary := &flakyStore{Store: mem()}
	var failures atomic.Int64
	fs, err := WithFallback(primary, mem(), FallbackOptions{Replicas: 3, Probe: 5 * time.Second, Now: clk.Now,
		OnFailure: func(error) { failures.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	s := NewService(fs, Options{Now: clk.Now})
	s.SetRules(mustRules(t, serviceRules))
	alice := desc("user", "alice")

	expect(t, s, request(1, alice), ok, short{ok, 2, 40}) // primary: 1 of 3
	primary.down.Store(true)
	// Local: each hit counts 3 times, so 1 of 3 is this replica's share.
	expect(t, s, request(1, alice), ok, short{ok, 0, 40})
	expect(t, s, request(1, alice), over, short{over, 0, 40})
	if got := failures.Load(); got != 1 {
		t.Errorf("%d failures reported, want 1 (then the probe interval)", got)
	}
	if got := primary.calls.Load(); got != 2 {
		t.Errorf("primary called %d times, want 2", got)
	}
	if !fs.Down() {
		t.Error("not down after a failure")
	}

	clk.Set(1_000_046) // past the probe; the primary answers again
	primary.down.Store(false)
	expect(t, s, request(1, alice), ok, short{ok, 1, 34}) // primary: 2 of 3
	if fs.Down() {
		t.Error("down after the primary answered")
	}
}

func TestFallbackOptions(t *testing.T) {
	s, err := NewMemoryStore(MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, o := range []FallbackOptions{{Replicas: -1}, {Probe: -time.Second}} {
		if _, err := WithFallback(s, s, o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	if _, err := WithFallback(nil, s, FallbackOptions{}); err == nil {
		t.Error("nil primary accepted")
	}
}

// TestFallbackWithoutLocal checks that, without a local store, the calls
// made while the primary is down fail at once with its last failure.
func TestFallbackWithoutLocal(t *testing.T) {
	clk := &clock{t: time.Unix(1_000_040, 0)}
	mem, err := NewMemoryStore(MemoryOptions{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	primary := &flakyStore{Store: mem, down: atomic.Bool{}}
	primary.down.Store(true)
	fs, err := WithFallback(primary, nil, FallbackOptions{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	cs := []Counter{{Key: "k", Hits: 1, TTL: time.Minute}}
	for i := range 3 {
		if err := fs.Add(context.Background(), cs); !errors.Is(err, errDown) {
			t.Fatalf("call %d: %v, want the primary's failure", i, err)
		}
	}
	if got := primary.calls.Load(); got != 1 {
		t.Errorf("primary called %d times while down, want 1", got)
	}
	clk.Set(1_000_042)
	primary.down.Store(false)
	if err := fs.Add(context.Background(), cs); err != nil || cs[0].Count != 1 {
		t.Fatalf("after the probe: %v, count %d", err, cs[0].Count)
	}
}

// hangingStore holds every call until its context ends, announcing each
// call on entered.
type hangingStore struct {
	entered chan struct{}
	calls   atomic.Int64
}

func (h *hangingStore) wait(ctx context.Context) error {
	h.calls.Add(1)
	h.entered <- struct{}{}
	<-ctx.Done()
	return fmt.Errorf("redis: i/o timeout: %w", ctx.Err())
}

func (h *hangingStore) Add(ctx context.Context, _ []Counter) error { return h.wait(ctx) }
func (h *hangingStore) Get(ctx context.Context, _ []Counter) error { return h.wait(ctx) }

// TestStoreTimeoutIsUnavailable: a store that gives up by its own timeout,
// while the caller still waits, is a store failure (Unavailable, the code
// a fail-open service acts on), not the caller's deadline.
func TestStoreTimeoutIsUnavailable(t *testing.T) {
	h := &hangingStore{entered: make(chan struct{}, 10)}
	bounded := storeFunc(func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		defer cancel()
		return h.wait(ctx)
	})
	s := NewService(bounded, Options{})
	s.SetRules(mustRules(t, serviceRules))
	_, err := GRPCServer{Service: s}.ShouldRateLimit(context.Background(), request(1, desc("user", "alice")))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("store timeout: %v, want Unavailable", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s = NewService(storeFunc(h.wait), Options{})
	s.SetRules(mustRules(t, serviceRules))
	if _, err := (GRPCServer{Service: s}).ShouldRateLimit(ctx, request(1, desc("user", "alice"))); status.Code(err) != codes.Canceled {
		t.Fatalf("caller's cancelled context: %v, want Canceled", err)
	}
}

// storeFunc is a Store whose every call is f.
type storeFunc func(ctx context.Context) error

func (f storeFunc) Add(ctx context.Context, _ []Counter) error { return f(ctx) }
func (f storeFunc) Get(ctx context.Context, _ []Counter) error { return f(ctx) }

// TestFallbackProbeIsHalfOpen: once the probe window has passed, one call
// probes the primary; the others count on the local store at once.
func TestFallbackProbeIsHalfOpen(t *testing.T) {
	clk := &clock{t: time.Unix(1_000_040, 0)}
	local, err := NewMemoryStore(MemoryOptions{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	h := &hangingStore{entered: make(chan struct{}, 100)}
	primary := &flakyStore{Store: h}
	primary.down.Store(true)
	fs, err := WithFallback(primary, local, FallbackOptions{Probe: time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	cs := []Counter{{Key: "k", Hits: 1, TTL: time.Minute}}
	if err := fs.Add(context.Background(), cs); err != nil || cs[0].Count != 1 {
		t.Fatalf("failing primary: %v %d", err, cs[0].Count)
	}
	primary.down.Store(false) // from now on the primary hangs
	clk.Set(1_000_041)
	ctx, cancel := context.WithCancel(context.Background())
	probe := make(chan error, 1)
	go func() { probe <- fs.Add(ctx, []Counter{{Key: "k", Hits: 1, TTL: time.Minute}}) }()
	<-h.entered
	for i := range 20 {
		one, cancelOne := context.WithTimeout(context.Background(), 10*time.Second)
		err := fs.Add(one, cs)
		cancelOne()
		if err != nil {
			t.Fatalf("call %d during the probe: %v, want counted on the local store", i, err)
		}
	}
	if n := primary.calls.Load(); n != 2 {
		t.Fatalf("primary asked %d times, want 2 (the failure and one probe)", n)
	}
	cancel()
	<-probe
}

// TestFallbackWindowIgnoresWallClockStep: a clock stepped back an hour right
// after a failure does not keep the primary unasked for that hour.
func TestFallbackWindowIgnoresWallClockStep(t *testing.T) {
	clk := &clock{t: time.Unix(1_000_040, 0)}
	mem, err := NewMemoryStore(MemoryOptions{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	primary := &flakyStore{Store: mem}
	primary.down.Store(true)
	fs, err := WithFallback(primary, nil, FallbackOptions{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	cs := []Counter{{Key: "k", Hits: 1, TTL: time.Minute}}
	if err := fs.Add(context.Background(), cs); !errors.Is(err, errDown) {
		t.Fatalf("failing primary: %v", err)
	}
	primary.down.Store(false)
	clk.Set(1_000_040 - 3600)
	if err := fs.Add(context.Background(), cs); err != nil || cs[0].Count != 1 {
		t.Fatalf("after the clock stepped back an hour: %v, want the primary asked again", err)
	}
}

// TestFailureModes: with the store down, fail-open answers OK, fail-closed
// Unavailable, and the local fallback counts at the limit over the
// replicas.
func TestFailureModes(t *testing.T) {
	clk := &clock{t: time.Unix(1_000_040, 0)}
	mem := func() Store {
		s, err := NewMemoryStore(MemoryOptions{Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	for _, tc := range []struct {
		mode  FailureMode
		codes []codes.Code
		over  []bool
	}{
		{FailOpen, []codes.Code{codes.OK, codes.OK, codes.OK}, []bool{false, false, false}},
		{FailClosed, []codes.Code{codes.Unavailable, codes.Unavailable, codes.Unavailable}, []bool{false, false, false}},
		{FailFallback, []codes.Code{codes.OK, codes.OK, codes.OK}, []bool{false, true, true}},
	} {
		primary := &flakyStore{Store: mem()}
		primary.down.Store(true)
		fs, err := WithFailurePolicy(primary, FailureOptions{Mode: tc.mode, Fallback: mem(), Replicas: 3, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		s := NewService(fs, Options{Now: clk.Now})
		s.SetRules(mustRules(t, serviceRules))
		for i := range tc.codes {
			r, err := GRPCServer{Service: s}.ShouldRateLimit(context.Background(), request(1, desc("user", "alice")))
			over := err == nil && r.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT
			if status.Code(err) != tc.codes[i] || over != tc.over[i] {
				t.Errorf("mode %d call %d: %v %v", tc.mode, i, r, err)
			}
		}
	}
	for _, o := range []FailureOptions{{Mode: FailFallback}, {Mode: 7}, {Timeout: -1}} {
		if _, err := WithFailurePolicy(mem(), o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
