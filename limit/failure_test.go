package limit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
)

// flaky wraps a store; while down, every call fails as a backend would, or
// blocks until the context ends when slow is set.
type flaky struct {
	limit.Store
	down, slow atomic.Bool
	calls      atomic.Int64
}

func (f *flaky) fail(ctx context.Context) error {
	f.calls.Add(1)
	if f.slow.Load() {
		<-ctx.Done()
		return &limit.StoreError{Op: "allow", Err: ctx.Err()}
	}
	if f.down.Load() {
		return &limit.StoreError{Op: "allow", Err: errors.New("connection refused")}
	}
	return nil
}

func (f *flaky) AllowN(ctx context.Context, key string, p limit.Policy, cost int64) (limit.Decision, error) {
	if err := f.fail(ctx); err != nil {
		return limit.Decision{}, err
	}
	return f.Store.AllowN(ctx, key, p, cost)
}

func (f *flaky) AllowAll(ctx context.Context, reqs []limit.Request, out []limit.Decision) ([]limit.Decision, error) {
	if err := f.fail(ctx); err != nil {
		return out, err
	}
	return f.Store.AllowAll(ctx, reqs, out)
}

func TestFailurePolicies(t *testing.T) {
	ctx := context.Background()
	clock := limittest.NewClock(limittest.Epoch)
	p := limit.FixedWindow(10, time.Hour).Named("p")
	for _, tc := range []struct {
		mode    limit.FailureMode
		reason  limit.Reason
		allowed int
	}{
		{limit.FailOpen, limit.ReasonFailOpen, 6},
		{limit.FailClosed, limit.ReasonFailClosed, 0},
		{limit.FailLocal, limit.ReasonFallback, 2}, // 10 over 5 replicas
	} {
		backend := &flaky{Store: newMemory(t, limit.MemoryOptions{Clock: clock})}
		var reported []error
		fs, err := limit.WithFailurePolicy(backend, limit.FailureOptions{Mode: tc.mode, Replicas: 5,
			Probe: time.Second, Clock: clock, OnFailure: func(err error) { reported = append(reported, err) }})
		if err != nil {
			t.Fatal(err)
		}
		backend.down.Store(true)
		allowed := 0
		for i := 0; i < 6; i++ {
			d, err := fs.AllowN(ctx, "k", p, 1)
			if err != nil || d.Reason != tc.reason && !(tc.mode == limit.FailLocal && d.Reason == limit.ReasonFallback) || d.Err == nil {
				t.Fatalf("mode %d call %d: %+v %v", tc.mode, i, d, err)
			}
			if d.Allowed {
				allowed++
			}
		}
		if allowed != tc.allowed || len(reported) != 1 || backend.calls.Load() != 1 || !fs.Down() {
			t.Fatalf("mode %d: allowed %d, reported %v, store called %d times", tc.mode, allowed, reported, backend.calls.Load())
		}
		// The store answers again: after Probe it is asked, and decides.
		backend.down.Store(false)
		clock.Advance(time.Second)
		if d, err := fs.AllowN(ctx, "k", p, 1); err != nil || d.Reason != limit.ReasonNone || !d.Allowed || d.Remaining != 9 {
			t.Fatalf("mode %d after recovery: %+v %v", tc.mode, d, err)
		}
		out, err := fs.AllowAll(ctx, []limit.Request{{Key: "k", Policy: p, Cost: 1}}, nil)
		if err != nil || !out[0].Allowed || out[0].Remaining != 8 {
			t.Fatalf("mode %d AllowAll after recovery: %+v %v", tc.mode, out, err)
		}
	}
}

func TestFailureTimeoutAndPassThrough(t *testing.T) {
	backend := &flaky{Store: newMemory(t, limit.MemoryOptions{})}
	fs, err := limit.WithFailurePolicy(backend, limit.FailureOptions{Mode: limit.FailClosed, Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p := limit.GCRA(limit.PerSecond(1), 1)
	backend.slow.Store(true)
	began := time.Now()
	d, err := fs.AllowN(context.Background(), "k", p, 1)
	if err != nil || d.Allowed || d.Reason != limit.ReasonFailClosed || d.RetryAfter != time.Second {
		t.Fatalf("slow store: %+v %v", d, err)
	}
	if waited := time.Since(began); waited > 5*time.Second {
		t.Fatalf("a 20ms timeout took %v", waited)
	}
	backend.slow.Store(false)
	fs2, _ := limit.WithFailurePolicy(backend, limit.FailureOptions{})
	if _, err := fs2.AllowN(context.Background(), "k", limit.Policy{}, 1); !errors.Is(err, limit.ErrInvalidPolicy) {
		t.Fatalf("an invalid policy is not a store failure: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	backend.slow.Store(true)
	if _, err := fs2.AllowN(ctx, "k", p, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller's cancelled context: %v", err)
	}
	if fs2.Stats().Failures != 0 {
		t.Fatalf("caller errors counted as failures: %+v", fs2.Stats())
	}
	if _, err := limit.WithFailurePolicy(nil, limit.FailureOptions{}); err == nil {
		t.Fatal("nil store accepted")
	}
}
