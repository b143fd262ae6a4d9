package adaptive

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/clock"
	"github.com/costwise/batcher/internal/errs"
	"github.com/costwise/batcher/internal/events"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// fixed is an inner limiter with a capacity the test sets.
type fixed struct {
	capacity atomic.Uint32
	target   atomic.Uint32
	started  atomic.Int32
	stopped  atomic.Int32
	provErr  error
}

func newFixed(c uint32) *fixed {
	f := &fixed{}
	f.capacity.Store(c)
	return f
}

func (f *fixed) Provision(ctx context.Context) error { return f.provErr }
func (f *fixed) MaxCapacity() uint32                 { return 2 * f.capacity.Load() }
func (f *fixed) Capacity() uint32                    { return f.capacity.Load() }
func (f *fixed) GiveMe(target uint32)                { f.target.Store(target) }
func (f *fixed) Start(ctx context.Context) error     { f.started.Add(1); return nil }
func (f *fixed) Stop()                               { f.stopped.Add(1) }

type recorded struct {
	event string
	val   int
	msg   string
}

func started(t *testing.T, inner *fixed, configure func(*Limiter)) (*Limiter, *clock.Fake, func() []recorded) {
	t.Helper()
	fc := clock.NewFake(t0)
	l := New(inner).WithClock(fc)
	if configure != nil {
		configure(l)
	}
	var mu sync.Mutex
	var evs []recorded
	l.AddListener(func(event string, val int, msg string, md interface{}) {
		mu.Lock()
		evs = append(evs, recorded{event, val, msg})
		mu.Unlock()
	})
	if err := l.Provision(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Stop)
	return l, fc, func() []recorded {
		mu.Lock()
		defer mu.Unlock()
		return append([]recorded(nil), evs...)
	}
}

// TestSteps checks the fraction against the AIMD rule, step by step.
func TestSteps(t *testing.T) {
	type step struct {
		at        time.Duration // since t0
		throttle  bool
		retry     time.Duration
		inner     uint32 // 0: unchanged
		wantCap   uint32
		wantDecr  int64
		wantThrot int64
	}
	steps := []step{
		{0, false, 0, 0, 10000, 0, 0},
		{time.Second, true, 0, 0, 9000, 1, 1},
		{1500 * time.Millisecond, true, 0, 0, 9000, 1, 2},       // same episode: within the cooldown
		{1999 * time.Millisecond, false, 0, 0, 9000, 1, 2},      // no growth during the cooldown
		{2 * time.Second, false, 0, 0, 9000, 1, 2},              // cooldown just ended: no whole step yet
		{2250 * time.Millisecond, false, 0, 0, 9025, 1, 2},      // one step of 0.25 %
		{3 * time.Second, false, 0, 0, 9100, 1, 2},              // 1 % per second
		{3 * time.Second, true, 3 * time.Second, 0, 8190, 2, 3}, // a new episode, retry-after 3 s
		{5 * time.Second, true, 0, 0, 8190, 2, 4},               // still within the retry-after
		{6 * time.Second, false, 0, 0, 8190, 2, 4},              // growth starts after it
		{7 * time.Second, false, 0, 5000, 4145, 2, 4},           // the inner capacity falls: the fraction stays
		{300 * time.Second, false, 0, 10000, 10000, 2, 4},       // back to the whole, never above
		{301 * time.Second, false, 0, 0, 10000, 2, 4},
	}
	inner := newFixed(10000)
	l, fc, _ := started(t, inner, nil)
	for i, s := range steps {
		fc.Set(t0.Add(s.at))
		if s.inner != 0 {
			inner.capacity.Store(s.inner)
		}
		if s.throttle {
			l.Throttled(s.retry)
		}
		if got := l.Capacity(); got != s.wantCap {
			t.Fatalf("step %d (%v): capacity %d, want %d", i, s.at, got, s.wantCap)
		}
		th, de := l.Stats()
		if th != s.wantThrot || de != s.wantDecr {
			t.Fatalf("step %d: %d throttles, %d decreases, want %d and %d", i, th, de, s.wantThrot, s.wantDecr)
		}
	}
}

func TestMinFraction(t *testing.T) {
	inner := newFixed(1000)
	l, fc, _ := started(t, inner, func(l *Limiter) { l.WithMinFraction(0.2).WithCooldown(0) })
	for i := 0; i < 100; i++ {
		l.Throttled(0)
		fc.Advance(time.Millisecond)
	}
	if got := l.Capacity(); got != 200 {
		t.Fatalf("capacity after 100 throttles: %d, want the floor 200", got)
	}
}

func TestEventsAndPassThrough(t *testing.T) {
	inner := newFixed(1000)
	l, fc, evs := started(t, inner, nil)
	l.GiveMe(1234)
	if inner.target.Load() != 1234 {
		t.Fatalf("target %d not passed on", inner.target.Load())
	}
	if l.MaxCapacity() != 2000 {
		t.Fatalf("MaxCapacity %d, want the inner 2000", l.MaxCapacity())
	}
	l.Throttled(0)
	fc.Advance(1250 * time.Millisecond)
	l.Capacity()
	l.Stop()
	l.Stop()
	want := []recorded{
		{events.CapacityEvent, 1000, ""},
		{events.CapacityEvent, 900, MsgThrottled},
		{events.CapacityEvent, 902, MsgRecovering},
		{events.ShutdownEvent, 0, ""},
	}
	got := evs()
	if len(got) != len(want) {
		t.Fatalf("events %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("event %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if inner.started.Load() != 1 || inner.stopped.Load() != 1 {
		t.Fatalf("inner started %d, stopped %d times, want 1 and 1", inner.started.Load(), inner.stopped.Load())
	}
}

func TestPauseListenerCountsAsThrottling(t *testing.T) {
	l, _, _ := started(t, newFixed(1000), nil)
	fn := l.Listener()
	fn(events.BatchEvent, 3, "", nil)
	if th, _ := l.Stats(); th != 0 {
		t.Fatalf("a batch event counted as throttling")
	}
	fn(events.PauseEvent, 500, "", nil)
	if th, de := l.Stats(); th != 1 || de != 1 || l.Capacity() != 900 {
		t.Fatalf("after a pause: %d throttles, %d decreases, capacity %d", th, de, l.Capacity())
	}
}

func TestInvalidSettings(t *testing.T) {
	cases := map[string]func(*Limiter){
		"Decrease":    func(l *Limiter) { l.WithDecrease(1) },
		"Increase":    func(l *Limiter) { l.WithIncrease(0) },
		"MinFraction": func(l *Limiter) { l.WithMinFraction(1.5) },
		"Cooldown":    func(l *Limiter) { l.WithCooldown(-time.Second) },
		"Step":        func(l *Limiter) { l.WithStep(0) },
	}
	for name, configure := range cases {
		l := New(newFixed(10))
		configure(l)
		err := l.Provision(context.Background())
		var ise errs.InvalidSettingError
		if !errors.As(err, &ise) || ise.Setting != name {
			t.Errorf("%s: Provision returned %v, want an InvalidSettingError for it", name, err)
		}
	}
	l := New(newFixed(10))
	if err := l.Provision(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.WithDecrease(0.5) // after Provision: ignored
	if l.decrease != DefaultDecrease {
		t.Fatalf("a With call after Provision changed the decrease to %v", l.decrease)
	}
}

func TestListenerMayStop(t *testing.T) {
	inner := newFixed(100)
	l := New(inner)
	l.AddListener(func(event string, val int, msg string, md interface{}) {
		if event == events.ShutdownEvent {
			l.Stop()
		}
	})
	l.Stop()
	if inner.stopped.Load() != 1 {
		t.Fatalf("inner stopped %d times", inner.stopped.Load())
	}
}

// The growth per second is what WithIncrease says whatever the step:
// "the increase per second is spread over the steps", also when a step is
// worth less than one part per million (a black-box audit saw +10 %/s for
// 1 %/s at a 10-µs step, and four times the rate of WithIncrease(1e-6)).
// Half the capacity after a decrease of 0.5, then 10 s of growth, read
// every step or every 37 ms.
func TestGrowthRateDoesNotDependOnStep(t *testing.T) {
	for _, c := range []struct {
		step     time.Duration
		increase float64
		want     float64 // fraction after 10 s
	}{
		{250 * time.Millisecond, 0.01, 0.6},
		{time.Millisecond, 0.01, 0.6},
		{10 * time.Microsecond, 0.01, 0.6},
		{time.Microsecond, 0.01, 0.6},
		{250 * time.Millisecond, 1e-6, 0.5 + 1e-5},
	} {
		for _, every := range []time.Duration{c.step, 37 * time.Millisecond} {
			l, fc, _ := started(t, newFixed(1_000_000), func(l *Limiter) {
				l.WithStep(c.step).WithIncrease(c.increase).WithDecrease(0.5)
			})
			l.Throttled(0)
			calm := fc.Now().Add(DefaultCooldown)
			fc.Set(calm)
			for at := time.Duration(0); at < 10*time.Second; at += max(every, time.Millisecond) {
				fc.Set(calm.Add(at))
				l.Fraction()
			}
			fc.Set(calm.Add(10 * time.Second))
			if got := l.Fraction(); math.Abs(got-c.want) > 1e-6 {
				t.Errorf("step %v, increase %g/s, read every %v: fraction %.7f after 10 s, want %.7f", c.step, c.increase, every, got, c.want)
			}
		}
	}
}
