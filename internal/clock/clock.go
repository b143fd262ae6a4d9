// Package clock is the time seam of the batcher module: the owner loops ask it
// for the current time, timers and tickers, so tests can drive them with a
// fake instead of sleeping.
package clock

import "time"

// Clock tells the time and makes timers and tickers.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
	// NewTicker returns a ticker that fires every d; d must be positive.
	NewTicker(d time.Duration) Ticker
}

// Timer fires once on its channel, like time.Timer.
type Timer interface {
	// C returns the channel the timer fires on.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it was pending.
	Stop() bool
	// Reset makes the timer fire after d; it reports whether it was pending.
	Reset(d time.Duration) bool
}

// Ticker fires repeatedly on its channel, like time.Ticker.
type Ticker interface {
	// C returns the channel the ticker fires on.
	C() <-chan time.Time
	// Stop turns the ticker off.
	Stop()
}

// Real returns the clock of the operating system.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

func (realClock) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }
