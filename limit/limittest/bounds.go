package limittest

import (
	"time"

	"github.com/costwise/batcher/limit"
)

// BoundTables are step tables at the largest parameters each algorithm
// accepts: a limit (or a period, or a window) at its documented maximum, a
// key spent to its limit and then settled to its largest debt (one more
// limit), which later decisions must still see. Every state these reach
// must come back exactly from wherever a store keeps it.
func BoundTables() []Table {
	const (
		units = 1 << 49 // the token bucket's and GCRA's largest limit × period per token, in µs
		fixed = 1 << 48 // the fixed window's largest limit × window, in µs
		slide = 1 << 30 // the sliding window's largest limit
		roll  = 1 << 20 // the rolling window's largest limit
	)
	// A bucket of units of capacity, spent and settled to twice that:
	// the debt of 2^50 units drains at one per µs.
	// A token weighs units/limit: one more fits once the debt is down to
	// units - units/limit.
	bucket := func(limit int64) []Step {
		tok := time.Duration(units / limit)
		return []Step{
			{At: 0, Cost: limit, Want: allow(0, units*us)},
			{At: 0, Op: "settle", Cost: limit, Want: allow(0, 2*units*us)},
			{At: 0, Cost: 1, Want: deny(0, (units+tok)*us, 2*units*us)},
			{At: (units + tok - 1) * us, Cost: 1, Want: deny(0, us, (units-tok+1)*us)},
			{At: (units + tok) * us, Cost: 1, Want: allow(0, units*us)},
			{At: 4 * units * us, Cost: 0, Want: allow(limit, 0)},
		}
	}
	return []Table{
		{Name: "token bucket 2^49 at 1/µs", Policy: limit.TokenBucket(units, limit.Every(us)),
			Steps: bucket(units)},
		{Name: "token bucket 1 per 2^49µs", Policy: limit.TokenBucket(1, limit.Every(units*us)),
			Steps: bucket(1)},
		{Name: "gcra 1/µs burst 2^49", Policy: limit.GCRA(limit.Every(us), units),
			Steps: bucket(units)},
		{Name: "gcra 1 per 2^49µs burst 1", Policy: limit.GCRA(limit.Every(units*us), 1),
			Steps: bucket(1)},
		{Name: "fixed window 2^48 per µs", Policy: limit.FixedWindow(fixed, us), Steps: []Step{
			{At: 0, Cost: fixed, Want: allow(0, us)},
			{At: 0, Op: "settle", Cost: fixed, Want: allow(0, us)},
			{At: 0, Cost: 1, Want: deny(0, us, us)},
			{At: us, Cost: 1, Want: allow(fixed-1, us)},
		}},
		{Name: "fixed window 2^18 per 2^30µs", Policy: limit.FixedWindow(1<<18, (1<<30)*us), Steps: []Step{
			// Epoch is 1,645,857 windows of 2^30 µs and 102,776,832 µs
			// after the Unix epoch (2026-01-01 is 1,767,225,600 s).
			{At: 0, Cost: 1 << 18, Want: allow(0, (1<<30-102_776_832)*us)},
			{At: 0, Op: "settle", Cost: 1 << 18, Want: allow(0, (1<<30-102_776_832)*us)},
			{At: 0, Cost: 1, Want: deny(0, (1<<30-102_776_832)*us, (1<<30-102_776_832)*us)},
			{At: (1<<30 - 102_776_832) * us, Cost: 1, Want: allow(1<<18-1, (1<<30)*us)},
		}},
		{Name: "sliding window 2^30 per 100ms", Policy: limit.SlidingWindow(slide, 100*ms), Steps: []Step{
			{At: 0, Cost: slide, Want: allow(0, 200*ms)},
			{At: 0, Op: "settle", Cost: slide, Want: allow(0, 200*ms)},
			// The count of 2^31 weighs (2^31 × (100,000 - e)) µs; one more
			// fits once that is at most (2^30 - 1) × 100,000.
			{At: 0, Cost: 1, Want: deny(0, 150_001*us, 200*ms)},
			{At: 150 * ms, Cost: 1, Want: deny(0, us, 50*ms)},
			{At: 150_001 * us, Cost: 1, Want: allow(21_473, 149_999*us)},
			{At: 200 * ms, Cost: 0, Want: allow(slide-1, 100*ms)},
			{At: 300 * ms, Cost: 0, Want: allow(slide, 0)},
		}},
		{Name: "sliding window 2^30 per 100ms, settled from rest", Policy: limit.SlidingWindow(slide, 100*ms), Steps: []Step{
			{At: 0, Op: "settle", Cost: 2 * slide, Want: allow(0, 200*ms)},
			{At: 0, Cost: 1, Want: deny(0, 150_001*us, 200*ms)},
			{At: 50 * ms, Cost: 1, Want: deny(0, 100_001*us, 150*ms)},
		}},
		{Name: "rolling window 2^20 per second", Policy: limit.RollingWindow(roll, s), Steps: []Step{
			{At: 0, Cost: roll, Want: allow(0, s)},
			{At: 0, Op: "settle", Cost: roll, Want: allow(0, s)},
			{At: 0, Cost: 1, Want: deny(0, s, s)},
			{At: s - us, Cost: 1, Want: deny(0, us, us)},
			{At: s, Cost: 1, Want: allow(roll-1, s)},
		}},
	}
}
