package failover

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a settable clock whose readings carry no monotonic time.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

var errStore = errors.New("connection refused")

// TestGuardSteps walks the circuit through its states: closed, open for
// Probe, one probe at a time, and closed again after a good probe.
func TestGuardSteps(t *testing.T) {
	clk := &fakeClock{}
	clk.ns.Store(int64(1e18))
	var reported int
	g := New(Options{Probe: time.Second, Now: clk.Now, OnFailure: func(error) { reported++ }})
	calls := 0
	answer := func(err error) func(context.Context) error {
		return func(context.Context) error { calls++; return err }
	}
	ctx := context.Background()
	steps := []struct {
		advance  time.Duration
		run      error
		asked    bool  // the store was asked
		failure  error // Do's failure
		down     bool  // Down after the step
		reported int
	}{
		{0, nil, true, nil, false, 0},
		{0, errStore, true, errStore, true, 1},
		{999 * time.Millisecond, nil, false, errStore, true, 1}, // within the window: not asked
		{time.Millisecond, errStore, true, errStore, true, 2},   // the probe fails: a new window
		{500 * time.Millisecond, nil, false, errStore, true, 2},
		{-time.Hour, nil, true, nil, false, 2}, // a clock stepped back ends the window; the probe succeeds
		{0, nil, true, nil, false, 2},
	}
	for i, st := range steps {
		clk.advance(st.advance)
		before := calls
		failure, err := g.Do(ctx, answer(st.run))
		if err != nil || failure != st.failure || (calls > before) != st.asked || g.Down() != st.down || reported != st.reported {
			t.Fatalf("step %d: failure %v err %v asked %v down %v reported %d; want %v %v %v %d",
				i, failure, err, calls > before, g.Down(), reported, st.failure, st.asked, st.down, st.reported)
		}
	}
}

// TestGuardProbeWhoseCallerLeft: a probe whose caller's context ends gives
// no verdict and lets the next call probe.
func TestGuardProbeWhoseCallerLeft(t *testing.T) {
	clk := &fakeClock{}
	g := New(Options{Probe: time.Second, Now: clk.Now})
	g.Do(context.Background(), func(context.Context) error { return errStore })
	clk.advance(time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	failure, err := g.Do(ctx, func(context.Context) error { cancel(); return context.Canceled })
	if failure != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("probe whose caller left: %v %v", failure, err)
	}
	asked := false
	if failure, err := g.Do(context.Background(), func(context.Context) error { asked = true; return nil }); failure != nil || err != nil || !asked {
		t.Fatalf("next call: asked %v, %v %v; want the next probe", asked, failure, err)
	}
	if g.Failures() != 1 {
		t.Fatalf("%d failures, want 1", g.Failures())
	}
}

// TestGuardTimeout: the guard's own timeout ends the call and is reported
// as timed out to Failure; an error Failure does not call a failure passes
// through and closes nothing.
func TestGuardTimeout(t *testing.T) {
	var timedOut bool
	g := New(Options{Timeout: time.Millisecond, Probe: time.Second,
		Failure: func(err error, to bool) error {
			timedOut = to
			if errors.Is(err, errStore) || to {
				return err
			}
			return nil
		}})
	failure, _ := g.Do(context.Background(), func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	if !errors.Is(failure, context.DeadlineExceeded) || !timedOut {
		t.Fatalf("timeout: %v timedOut=%v", failure, timedOut)
	}
	g = New(Options{Probe: time.Second, Failure: func(err error, _ bool) error { return nil }})
	bad := errors.New("invalid policy")
	if failure, err := g.Do(context.Background(), func(context.Context) error { return bad }); failure != nil || err != bad || g.Down() {
		t.Fatalf("an answer of the store: %v %v down=%v", failure, err, g.Down())
	}
}
