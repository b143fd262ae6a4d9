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
		{limit.FailFallback, limit.ReasonFallback, 2}, // 10 over 5 replicas
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
			if err != nil || d.Reason != tc.reason && !(tc.mode == limit.FailFallback && d.Reason == limit.ReasonFallback) || d.Err == nil {
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

// hanging is a store that, while hang is set, holds every call until
// release is closed (then fails it) or its context ends, announcing each
// call on entered.
type hanging struct {
	limit.Store
	hang    atomic.Bool
	calls   atomic.Int64
	entered chan struct{}
	release chan struct{}
}

func (h *hanging) AllowN(ctx context.Context, key string, p limit.Policy, cost int64) (limit.Decision, error) {
	h.calls.Add(1)
	if !h.hang.Load() {
		return h.Store.AllowN(ctx, key, p, cost)
	}
	h.entered <- struct{}{}
	select {
	case <-h.release:
		return limit.Decision{}, &limit.StoreError{Op: "allow", Err: errors.New("connection reset")}
	case <-ctx.Done():
		return limit.Decision{}, ctx.Err()
	}
}

// TestFailureProbeIsHalfOpen: once the probe window of a failure has
// passed, one call probes the store and every other call is decided by the
// failure mode at once, without going to the store, until the probe ends.
func TestFailureProbeIsHalfOpen(t *testing.T) {
	clock := limittest.NewClock(limittest.Epoch)
	h := &hanging{Store: newMemory(t, limit.MemoryOptions{Clock: clock}),
		entered: make(chan struct{}, 100), release: make(chan struct{})}
	fs, err := limit.WithFailurePolicy(h, limit.FailureOptions{Mode: limit.FailClosed, Probe: time.Second,
		Timeout: 30 * time.Second, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	p := limit.FixedWindow(10, time.Hour).Named("p")
	h.hang.Store(true)
	close(h.release) // the first call fails at once
	if d, err := fs.AllowN(context.Background(), "k", p, 1); err != nil || d.Reason != limit.ReasonFailClosed {
		t.Fatalf("failing store: %+v %v", d, err)
	}
	<-h.entered
	h.release = make(chan struct{})
	clock.Advance(time.Second) // the window has passed: the next call probes

	probeDone := make(chan limit.Decision, 1)
	go func() {
		d, _ := fs.AllowN(context.Background(), "k", p, 1)
		probeDone <- d
	}()
	<-h.entered // the probe is at the store, which does not answer
	const others = 50
	for i := range others {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		d, err := fs.AllowN(ctx, "k", p, 1)
		cancel()
		if err != nil || d.Reason != limit.ReasonFailClosed || d.Allowed {
			t.Fatalf("call %d during the probe: %+v %v, want decided fail-closed at once", i, d, err)
		}
	}
	if n := h.calls.Load(); n != 2 {
		t.Fatalf("store asked %d times, want 2: the failure and one probe", n)
	}
	close(h.release) // the probe fails: the window starts again
	if d := <-probeDone; d.Reason != limit.ReasonFailClosed {
		t.Fatalf("failed probe: %+v", d)
	}
	if !fs.Down() {
		t.Fatal("a failed probe did not open a new window")
	}
	h.hang.Store(false)
	clock.Advance(time.Second)
	if d, err := fs.AllowN(context.Background(), "k", p, 1); err != nil || d.Reason != limit.ReasonNone || !d.Allowed {
		t.Fatalf("probe on a store that answers: %+v %v", d, err)
	}
	if d, err := fs.AllowN(context.Background(), "k", p, 1); err != nil || d.Reason != limit.ReasonNone || h.calls.Load() != 4 {
		t.Fatalf("after a good probe every call goes to the store: %+v %v, %d calls", d, err, h.calls.Load())
	}
}

// TestFailureWindowIgnoresWallClockStep: a clock stepped back an hour right
// after a failure does not keep the store unasked for that hour.
func TestFailureWindowIgnoresWallClockStep(t *testing.T) {
	clock := limittest.NewClock(limittest.Epoch)
	backend := &flaky{Store: newMemory(t, limit.MemoryOptions{})}
	fs, err := limit.WithFailurePolicy(backend, limit.FailureOptions{Mode: limit.FailClosed, Probe: time.Second, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	p := limit.FixedWindow(10, time.Hour).Named("p")
	backend.down.Store(true)
	if d, _ := fs.AllowN(context.Background(), "k", p, 1); d.Reason != limit.ReasonFailClosed {
		t.Fatalf("failing store: %+v", d)
	}
	backend.down.Store(false)
	clock.Advance(-time.Hour)
	if d, err := fs.AllowN(context.Background(), "k", p, 1); err != nil || d.Reason != limit.ReasonNone || !d.Allowed {
		t.Fatalf("after the clock stepped back an hour: %+v %v, want the store asked again", d, err)
	}

	// With readings that carry monotonic time (the default clock's), the
	// window is measured on them: it holds for Probe, then ends.
	mono := &monoClock{base: time.Now()}
	fs, _ = limit.WithFailurePolicy(backend, limit.FailureOptions{Mode: limit.FailClosed, Probe: time.Second, Clock: mono})
	backend.down.Store(true)
	fs.AllowN(context.Background(), "k", p, 1)
	backend.down.Store(false)
	mono.advance(999 * time.Millisecond)
	if !fs.Down() {
		t.Fatal("window ended early on a monotonic clock")
	}
	mono.advance(time.Millisecond)
	if fs.Down() {
		t.Fatal("window did not end after Probe on a monotonic clock")
	}
}

// monoClock reads a time.Now reading, which carries monotonic time, moved
// by what the test advanced.
type monoClock struct {
	base time.Time
	off  atomic.Int64
}

func (c *monoClock) Now() time.Time          { return c.base.Add(time.Duration(c.off.Load())) }
func (c *monoClock) advance(d time.Duration) { c.off.Add(int64(d)) }

// TestFailLocalIsFailFallback: the former name still names the mode.
func TestFailLocalIsFailFallback(t *testing.T) {
	if limit.FailLocal != limit.FailFallback {
		t.Fatal("FailLocal is not FailFallback")
	}
}
