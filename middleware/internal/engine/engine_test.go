package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/middleware/limitcore"
)

// scripted is a Backend that answers with fixed results or a fixed error,
// recording what it was asked.
type scripted struct {
	results []Result
	err     error
	calls   int
	gotKeys []string
	gotPols []int
	gotCost int64
}

func (s *scripted) Decide(_ context.Context, ps []int, ks []string, cost int64, out []Result) error {
	s.calls++
	s.gotPols, s.gotKeys, s.gotCost = append([]int(nil), ps...), append([]string(nil), ks...), cost
	if s.err != nil {
		return s.err
	}
	copy(out, s.results)
	return nil
}

var errStore = errors.New("store down")

func TestEngineOutcomes(t *testing.T) {
	allow := Result{Allowed: true, Limit: 10, Remaining: 4, Reset: time.Second}
	deny := func(d time.Duration) Result { return Result{Limit: 10, RetryAfter: d, Reset: 2 * time.Second} }
	for _, tc := range []struct {
		name     string
		cfg      Config
		results  []Result
		err      error
		fallback *scripted
		action   Action
		retry    time.Duration
		shadow   bool
		result   limitcore.Result // counted for each applied policy
	}{
		{"all allow", Config{}, []Result{allow, allow}, nil, nil, Allow, 0, false, limitcore.ResultAllowed},
		{"one denies", Config{}, []Result{allow, deny(3 * time.Second)}, nil, nil, Deny, 3 * time.Second, false, limitcore.ResultDenied},
		{"longest retry wins", Config{}, []Result{deny(time.Second), deny(5 * time.Second)}, nil, nil, Deny, 5 * time.Second, false, limitcore.ResultDenied},
		{"never admits: no retry", Config{}, []Result{deny(0), deny(5 * time.Second)}, nil, nil, Deny, 0, false, limitcore.ResultDenied},
		{"shadow", Config{Shadow: true}, []Result{allow, deny(time.Second)}, nil, nil, Allow, time.Second, true, limitcore.ResultShadowDenied},
		{"fail open", Config{}, nil, errStore, nil, Allow, 0, false, limitcore.ResultFailedOpen},
		{"fail closed", Config{Mode: FailClosed, FailRetry: 2 * time.Second}, nil, errStore, nil, FailDenied, 2 * time.Second, false, limitcore.ResultFailedClosed},
		{"fallback decides", Config{Mode: FailFallback}, nil, errStore, &scripted{results: []Result{allow, deny(time.Second)}}, Deny, time.Second, false, limitcore.ResultDenied},
		{"fallback fails too", Config{Mode: FailFallback}, nil, errStore, &scripted{err: errStore}, Allow, 0, false, limitcore.ResultFailedOpen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &countingRecorder{}
			b := &scripted{results: tc.results, err: tc.err}
			cfg := tc.cfg
			cfg.Policies, cfg.Backend, cfg.Recorder = []string{"a", "b"}, b, rec
			if tc.fallback != nil {
				cfg.Fallback = tc.fallback
			}
			e, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var o Outcome
			e.Decide(context.Background(), []string{"k1", "k2"}, 3, &o)
			if o.Action != tc.action || o.RetryAfter != tc.retry || o.Shadow != tc.shadow {
				t.Errorf("outcome action %v retry %v shadow %v, want %v %v %v", o.Action, o.RetryAfter, o.Shadow, tc.action, tc.retry, tc.shadow)
			}
			if (tc.err != nil) != (o.Err != nil) {
				t.Errorf("Err = %v", o.Err)
			}
			for p := range 2 {
				if got := rec.decisions[p][tc.result]; got != 1 {
					t.Errorf("policy %d counted %d %v, want 1", p, got, tc.result)
				}
			}
			errs := 0
			if tc.err != nil {
				errs = 1
			}
			if rec.storeErrors != errs {
				t.Errorf("store errors = %d, want %d", rec.storeErrors, errs)
			}
			if rec.durations != 1 {
				t.Errorf("%d durations observed, want 1", rec.durations)
			}
		})
	}
}

// countingRecorder counts what an engine records.
type countingRecorder struct {
	mu          sync.Mutex
	decisions   [MaxPolicies][limitcore.NumResults]int // by policy, then result
	durations   int
	storeErrors int
}

func (r *countingRecorder) Decision(p int, res limitcore.Result) {
	r.mu.Lock()
	r.decisions[p][res]++
	r.mu.Unlock()
}

func (r *countingRecorder) Duration(time.Duration) {
	r.mu.Lock()
	r.durations++
	r.mu.Unlock()
}

func (r *countingRecorder) StoreError() {
	r.mu.Lock()
	r.storeErrors++
	r.mu.Unlock()
}

func TestEngineSkipsEmptyKeys(t *testing.T) {
	b := &scripted{results: []Result{{Allowed: true}}}
	e, _ := New(Config{Policies: []string{"a", "b", "c"}, Backend: b})
	var o Outcome
	e.Decide(context.Background(), []string{"", "kb", ""}, 2, &o)
	if o.N != 1 || o.Policies[0] != 1 || len(b.gotKeys) != 1 || b.gotKeys[0] != "kb" || b.gotCost != 2 {
		t.Errorf("applied %d policies %v, backend got %v %v cost %d", o.N, o.Policies[:o.N], b.gotPols, b.gotKeys, b.gotCost)
	}
	o = Outcome{}
	e.Decide(context.Background(), []string{"", "", ""}, 1, &o)
	if o.Action != Allow || o.N != 0 || b.calls != 1 {
		t.Errorf("no key: action %v, %d policies, %d backend calls; want allowed without a call", o.Action, o.N, b.calls)
	}
}

func TestEngineTimeout(t *testing.T) {
	b := BackendFunc(func(ctx context.Context, _ []int, _ []string, _ int64, _ []Result) error {
		<-ctx.Done() // a store that never answers
		return ctx.Err()
	})
	e, _ := New(Config{Policies: []string{"a"}, Backend: b, Timeout: time.Millisecond})
	var o Outcome
	e.Decide(context.Background(), []string{"k"}, 1, &o)
	if !errors.Is(o.Err, context.DeadlineExceeded) || o.Action != Allow {
		t.Errorf("slow store: err %v action %v, want DeadlineExceeded and fail-open", o.Err, o.Action)
	}
}

func TestTooManyPolicies(t *testing.T) {
	if _, err := New(Config{Policies: make([]string, MaxPolicies+1)}); !errors.Is(err, ErrTooManyPolicies) {
		t.Errorf("err %v", err)
	}
}

// The deprecated Registerer option needs the adapter package promlimit
// installs; without it, and with a MetricsProvider beside it, Build refuses
// the options instead of dropping the metrics.
func TestBuildRegistererNeedsTheAdapter(t *testing.T) {
	if registererAdapter.Load() != nil {
		t.Fatal("an adapter is installed in this test binary: the test would prove nothing")
	}
	mem, err := limit.NewMemory(limit.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	base := Options{Package: "httplimit", Names: []string{"p"}, Limits: []limit.Policy{limit.FixedWindow(1, time.Second)}, Store: mem}
	for name, o := range map[string]Options{
		"no adapter": {Registerer: struct{}{}},
		"both":       {Registerer: struct{}{}, MetricsProvider: provider{&countingRecorder{}}},
	} {
		o.Package, o.Names, o.Limits, o.Store = base.Package, base.Names, base.Limits, base.Store
		_, err := Build(o)
		var ce *limitcore.ConfigError
		if !errors.As(err, &ce) || ce.Field != "Registerer" || !strings.HasPrefix(err.Error(), "httplimit: invalid Registerer: ") {
			t.Errorf("%s: err %v, want a ConfigError on Registerer", name, err)
		}
	}
}
