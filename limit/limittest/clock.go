// Package limittest is the conformance suite of limit.Store implementations,
// in the style of testing/fstest: Run checks a store against the definition
// of every algorithm on a fake clock, step by step, and under concurrency.
// The memory store and the Redis store both pass it.
package limittest

import (
	"sync/atomic"
	"time"
)

// Clock is a fake limit.Clock whose time moves only when Set or Advance is
// called. It is safe for concurrent use.
type Clock struct{ ns atomic.Int64 }

// NewClock returns a clock set to t.
func NewClock(t time.Time) *Clock {
	c := &Clock{}
	c.Set(t)
	return c
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()).UTC() }

// Set sets the clock to t, which may be before its time.
func (c *Clock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }

// Advance moves the clock by d, which may be negative.
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// Epoch is the suite's start time: midnight UTC, so a multiple of every
// window up to a day since the Unix epoch.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
