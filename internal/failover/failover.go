// Package failover is the part of a store failure policy that does not
// depend on what the store holds: it bounds each call by a timeout, tells a
// failure of the store from the caller's own errors, and keeps a half-open
// circuit so that a store that just failed is not asked again until a probe
// window has passed, and then by one call at a time.
//
// limit.FailureStore (keyed limits) and envoyrl.FailureStore (Envoy's
// counters) are thin adapters over a Guard; they differ only in how they
// decide a call the store could not.
//
// Durations are measured between readings of the guard's clock with
// time.Time.Sub. Readings of time.Now carry the monotonic clock, so a step
// of the wall clock does not move a probe window at all. With a clock whose
// readings carry no monotonic time (a test clock), a backward step ends the
// window at once and a forward step ends it early: either costs one early
// probe, never a longer outage.
package failover

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Options configure a Guard.
type Options struct {
	// Timeout bounds each call to the store; 0 leaves only the caller's
	// context.
	Timeout time.Duration
	// Probe is the window after a failure during which the store is not
	// asked. It must be positive.
	Probe time.Duration
	// Now is the clock; time.Now by default.
	Now func() time.Time
	// Failure tells whether err, a call's error that is not the caller's
	// context ending, is a failure of the store, and returns the failure to
	// report (nil: err is the store's answer, such as an invalid request).
	// timedOut is true when the guard's own timeout ended the call. Nil
	// means every such error is a failure, reported as it is.
	Failure func(err error, timedOut bool) error
	// OnFailure, when set, is called with every failure. It must not block.
	OnFailure func(error)
}

// Guard is a half-open circuit over a store. Closed, every call goes to the
// store. A failure opens it for Probe: calls get the last failure at once,
// without asking the store. After Probe the first call to come is the
// probe and goes to the store; the others get the last failure at once
// until the probe ends: a success closes the circuit, a failure opens it
// for another Probe, and a probe whose caller went away leaves the next
// call to probe. Guard is safe for concurrent use.
type Guard struct {
	o     Options
	epoch time.Time // the clock's reading when the guard was made

	open     atomic.Bool
	failedAt atomic.Int64 // nanoseconds after epoch of the failure that opened the circuit
	probing  atomic.Bool  // a probe is in flight
	lastErr  atomic.Pointer[error]
	failures atomic.Int64
}

// New returns a closed guard.
func New(o Options) *Guard {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Failure == nil {
		o.Failure = func(err error, _ bool) error { return err }
	}
	return &Guard{o: o, epoch: o.Now()}
}

// since returns the clock's reading as a duration after epoch.
func (g *Guard) since() int64 { return int64(g.o.Now().Sub(g.epoch)) }

// inWindow reports whether the probe window of the last failure holds now.
// A reading before the failure (a clock stepped back) ends the window.
func (g *Guard) inWindow(now int64) bool {
	elapsed := now - g.failedAt.Load()
	return elapsed >= 0 && elapsed < int64(g.o.Probe)
}

// Down reports whether the circuit is open and its probe window holds: a
// call now would not go to the store.
func (g *Guard) Down() bool { return g.open.Load() && g.inWindow(g.since()) }

// Failures returns how many calls the store failed.
func (g *Guard) Failures() int64 { return g.failures.Load() }

// Last returns the store's last failure, or ErrDown when none is known.
func (g *Guard) Last() error {
	if p := g.lastErr.Load(); p != nil {
		return *p
	}
	return ErrDown
}

// ErrDown is Last's answer before any failure was recorded.
var ErrDown = errors.New("failover: store down")

// enter reports whether the caller may ask the store, and whether it is
// the probe of an open circuit.
func (g *Guard) enter() (ok, probe bool) {
	if !g.open.Load() {
		return true, false
	}
	if g.inWindow(g.since()) || !g.probing.CompareAndSwap(false, true) {
		return false, false
	}
	return true, true
}

// Do runs run on the store unless the circuit says not to ask it. It
// returns failure, the store's failure (the last one when the store was
// not asked), with err nil; or failure nil and err, run's own answer,
// which is the caller's context error unchanged when that context ended.
// run gets the caller's context bounded by Timeout, and must return when
// that context ends.
func (g *Guard) Do(ctx context.Context, run func(context.Context) error) (failure, err error) {
	ok, probe := g.enter()
	if !ok {
		return g.Last(), nil
	}
	cctx := ctx
	if g.o.Timeout > 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, g.o.Timeout)
		defer cancel()
	}
	err = run(cctx)
	switch {
	case err == nil:
		g.succeed(probe)
		return nil, nil
	case ctx.Err() != nil:
		// The caller went away: no verdict on the store.
		if probe {
			g.probing.Store(false)
		}
		return nil, err
	}
	if failure = g.o.Failure(err, cctx.Err() != nil); failure == nil {
		g.succeed(probe)
		return nil, err
	}
	g.fail(failure, probe)
	return failure, nil
}

// succeed closes the circuit after a probe that the store answered.
func (g *Guard) succeed(probe bool) {
	if probe {
		g.open.Store(false)
		g.probing.Store(false)
	}
}

// fail records failure and opens the circuit for Probe from now.
func (g *Guard) fail(failure error, probe bool) {
	g.failures.Add(1)
	stored := failure
	g.lastErr.Store(&stored)
	g.failedAt.Store(g.since())
	g.open.Store(true)
	if probe {
		g.probing.Store(false)
	}
	if g.o.OnFailure != nil {
		g.o.OnFailure(failure)
	}
}
