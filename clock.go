package batcher

import "github.com/costwise/batcher/internal/clock"

// Clock is the source of time for a Batcher or rate limiter: the current time,
// timers and tickers. The default is the system clock; batchertest.FakeClock
// lets tests move time by hand.
type Clock = clock.Clock

// Timer is a one-shot timer made by a Clock.
type Timer = clock.Timer

// Ticker is a periodic ticker made by a Clock.
type Ticker = clock.Ticker

// RealClock returns the system clock, the default of every type here.
func RealClock() Clock { return clock.Real() }
