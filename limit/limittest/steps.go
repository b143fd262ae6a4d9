package limittest

import (
	"time"

	"github.com/costwise/batcher/limit"
)

// Step is one call of a step table, at a time after Epoch, and what it must
// answer.
type Step struct {
	// At is the time of the call after Epoch.
	At time.Duration
	// Op is "" for AllowN, "settle" (Cost is the delta) or "reset".
	Op string
	// Cost is the cost, or the delta of a settle.
	Cost int64
	// Want is the decision expected; its Limit and Policy are filled in from
	// the table's policy.
	Want limit.Decision
}

// Table is a policy and the steps that define its behaviour.
type Table struct {
	Name   string
	Policy limit.Policy
	Steps  []Step
}

const (
	ms = time.Millisecond
	us = time.Microsecond
	s  = time.Second
)

func allow(rem int64, reset time.Duration) limit.Decision {
	return limit.Decision{Allowed: true, Remaining: rem, ResetAfter: reset}
}

func deny(rem int64, retry, reset time.Duration) limit.Decision {
	return limit.Decision{Reason: limit.ReasonLimited, Remaining: rem, RetryAfter: retry, ResetAfter: reset}
}

func exceeds(rem int64, reset time.Duration) limit.Decision {
	return limit.Decision{Reason: limit.ReasonExceedsLimit, Remaining: rem, ResetAfter: reset}
}

// Tables are the step tables of every algorithm: fresh keys, costs above the
// limit, cost 0, exact retry times (never early), window boundaries,
// settling, resetting and time going backwards.
func Tables() []Table {
	bucket := func(back limit.Decision) []Step {
		return []Step{
			{At: 0, Cost: 1, Want: allow(2, 1*s)},
			{At: 0, Cost: 2, Want: allow(0, 3*s)},
			{At: 0, Cost: 1, Want: deny(0, 1*s, 3*s)},
			{At: 500 * ms, Cost: 1, Want: deny(0, 500*ms, 2500*ms)},
			{At: 1*s - us, Cost: 1, Want: deny(0, us, 2*s+us)},
			{At: 1 * s, Cost: 1, Want: allow(0, 3*s)},
			{At: 1 * s, Cost: 4, Want: exceeds(0, 3*s)},
			{At: 1 * s, Cost: 0, Want: allow(0, 3*s)},
			{At: 2500 * ms, Cost: 0, Want: allow(1, 1500*ms)},
			{At: 4 * s, Cost: 0, Want: allow(3, 0)},
			{At: 4 * s, Cost: 3, Want: allow(0, 3*s)},
			{At: 2 * s, Cost: 1, Want: back}, // the clock went back 2 s
			{At: 5 * s, Cost: 1, Want: allow(0, 3*s)},
			{At: 5 * s, Op: "settle", Cost: -2, Want: allow(2, 1*s)},
			{At: 5 * s, Op: "settle", Cost: -9, Want: allow(3, 0)},
			{At: 5 * s, Op: "settle", Cost: 5, Want: allow(0, 5*s)},
			{At: 6 * s, Cost: 1, Want: deny(0, 2*s, 4*s)},
			{At: 6 * s, Op: "reset", Want: allow(3, 0)},
			{At: 6 * s, Cost: 3, Want: allow(0, 3*s)},
		}
	}
	return append(settleTables(), []Table{
		{Name: "token bucket 3, 1/s", Policy: limit.TokenBucket(3, limit.PerSecond(1)),
			// The bucket's time stays at 4 s: 3 tokens of debt, 1 s to wait.
			Steps: bucket(deny(0, 1*s, 3*s))},
		{Name: "gcra 1/s burst 3", Policy: limit.GCRA(limit.PerSecond(1), 3),
			// The theoretical arrival time stays at 7 s, 5 s ahead of 2 s.
			Steps: bucket(deny(0, 3*s, 5*s))},
		{Name: "token bucket 2, 0.1/s", Policy: limit.TokenBucket(2, limit.Rate{Count: 1, Period: 10 * s}), Steps: []Step{
			{At: 0, Cost: 2, Want: allow(0, 20*s)},
			{At: 10*s - us, Cost: 1, Want: deny(0, us, 10*s+us)},
			{At: 10 * s, Cost: 1, Want: allow(0, 20*s)},
		}},
		{Name: "gcra 3/s burst 1", Policy: limit.GCRA(limit.PerSecond(3), 1), Steps: []Step{
			// One emission per 333333.33 µs, exactly: times are rounded up,
			// never early, and a late request delays the next one.
			{At: 0, Cost: 1, Want: allow(0, 333334*us)},
			{At: 0, Cost: 1, Want: deny(0, 333334*us, 333334*us)},
			{At: 333333 * us, Cost: 1, Want: deny(0, us, us)},
			{At: 333334 * us, Cost: 1, Want: allow(0, 333334*us)},
			{At: 666667 * us, Cost: 1, Want: deny(0, us, us)},
			{At: 666668 * us, Cost: 1, Want: allow(0, 333334*us)},
			{At: 1 * s, Cost: 1, Want: deny(0, 2*us, 2*us)},
		}},
		{Name: "fixed window 3 per minute", Policy: limit.FixedWindow(3, time.Minute), Steps: []Step{
			{At: 10 * s, Cost: 2, Want: allow(1, 50*s)},
			{At: 20 * s, Cost: 2, Want: deny(1, 40*s, 40*s)},
			{At: 20 * s, Cost: 1, Want: allow(0, 40*s)},
			{At: 60*s - us, Cost: 1, Want: deny(0, us, us)},
			{At: 60 * s, Cost: 4, Want: exceeds(3, 0)},
			{At: 60 * s, Cost: 3, Want: allow(0, 60*s)},
			{At: 50 * s, Cost: 1, Want: deny(0, 60*s, 60*s)}, // back into the last window: stays in the new one
			{At: 61 * s, Op: "settle", Cost: -2, Want: allow(2, 59*s)},
			{At: 61 * s, Op: "settle", Cost: 3, Want: allow(0, 59*s)},
			{At: 62 * s, Cost: 0, Want: allow(0, 58*s)},
			{At: 121 * s, Cost: 0, Want: allow(3, 0)},
		}},
		{Name: "rolling window 3 per 10s", Policy: limit.RollingWindow(3, 10*s), Steps: []Step{
			{At: 0, Cost: 1, Want: allow(2, 10*s)},
			{At: 2 * s, Cost: 2, Want: allow(0, 10*s)},
			{At: 5 * s, Cost: 1, Want: deny(0, 5*s, 7*s)},
			{At: 5 * s, Cost: 3, Want: deny(0, 7*s, 7*s)},
			{At: 5 * s, Cost: 4, Want: exceeds(0, 7*s)},
			{At: 10*s - us, Cost: 1, Want: deny(0, us, 2*s+us)},
			{At: 10 * s, Cost: 1, Want: allow(0, 10*s)},
			{At: 12 * s, Cost: 2, Want: allow(0, 10*s)},
			{At: 13 * s, Op: "settle", Cost: -1, Want: allow(1, 9*s)},
			{At: 13 * s, Op: "settle", Cost: 1, Want: allow(0, 10*s)},
			{At: 23 * s, Cost: 0, Want: allow(3, 0)},
		}},
		{Name: "sliding window 10 per 10s", Policy: limit.SlidingWindow(10, 10*s), Steps: []Step{
			{At: 0, Cost: 10, Want: allow(0, 20*s)},
			{At: 5 * s, Cost: 1, Want: deny(0, 6*s, 15*s)},
			{At: 5 * s, Cost: 11, Want: exceeds(0, 15*s)},
			{At: 11*s - us, Cost: 1, Want: deny(0, us, 9*s+us)},
			{At: 11 * s, Cost: 1, Want: allow(0, 19*s)},
			{At: 15 * s, Cost: 0, Want: allow(4, 15*s)},
			{At: 15 * s, Cost: 4, Want: allow(0, 15*s)},
			{At: 15 * s, Op: "settle", Cost: -2, Want: allow(2, 15*s)},
			{At: 40 * s, Cost: 0, Want: allow(10, 0)},
		}},
	}...)
}
