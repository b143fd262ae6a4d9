package limittest

import (
	"time"

	"github.com/costwise/batcher/limit"
)

// settleTables hold Settle to its bounds on every algorithm: a key spent to
// its limit and charged 100 limits more holds one limit of debt and no
// more, so that a refund of two limits brings it back to rest exactly; a
// refund past rest leaves it at rest, admitting its limit and no more.
func settleTables() []Table {
	// bounded is the steps of a limit of l whose spent limit rests after
	// rest, with retry the wait for a cost of 1 under the limit of debt, and
	// again the wait for one once the limit is spent from rest.
	bounded := func(l int64, rest, debtRest, retry, again time.Duration) []Step {
		return []Step{
			{At: 0, Cost: l, Want: allow(0, rest)},
			{At: 0, Op: "settle", Cost: 100 * l, Want: allow(0, debtRest)},
			{At: 0, Cost: 1, Want: deny(0, retry, debtRest)},
			{At: 0, Op: "settle", Cost: -2 * l, Want: allow(l, 0)},
			{At: 0, Op: "settle", Cost: -5 * l, Want: allow(l, 0)},
			{At: 0, Cost: l, Want: allow(0, rest)},
			{At: 0, Cost: 1, Want: deny(0, again, rest)},
		}
	}
	return []Table{
		// 3 tokens at 1/s: the debt stops at 6 tokens, 6 s from rest, and
		// one token fits after 4 s.
		{Name: "token bucket settle bounds", Policy: limit.TokenBucket(3, limit.PerSecond(1)),
			Steps: bounded(3, 3*s, 6*s, 4*s, 1*s)},
		{Name: "gcra settle bounds", Policy: limit.GCRA(limit.PerSecond(1), 3),
			Steps: bounded(3, 3*s, 6*s, 4*s, 1*s)},
		{Name: "fixed window settle bounds", Policy: limit.FixedWindow(3, time.Minute),
			Steps: bounded(3, time.Minute, time.Minute, time.Minute, time.Minute)},
		{Name: "rolling window settle bounds", Policy: limit.RollingWindow(3, 10*s),
			Steps: bounded(3, 10*s, 10*s, 10*s, 10*s)},
		// A count of 20 (not 1,010) weighs on the next window: one more
		// fits once 9/20 of it has passed, at 15.5 s; from a count of 10,
		// once a tenth has, at 11 s.
		{Name: "sliding window settle bounds", Policy: limit.SlidingWindow(10, 10*s),
			Steps: bounded(10, 20*s, 20*s, 15500*ms, 11*s)},
	}
}
