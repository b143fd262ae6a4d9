package batcher

import (
	"math"
	"math/bits"
	"time"
)

// nanoPerCost is the number of credit units in one unit of cost. Credit is
// kept as an integer count of nano-cost (cost × 1e-9) so that a capacity in
// cost per second times an elapsed time in nanoseconds is exact: no float
// rounding can let a release slip through when the balance should be zero.
const nanoPerCost = int64(time.Second)

// credit is the release budget of a Batcher: it grows at the limiter's
// capacity per second of elapsed time, up to one flush interval's worth, and
// every released operation spends its cost. The balance may go negative by
// less than one operation's cost; that debt is repaid before anything else
// of positive cost is released, so the long-run release rate equals the
// capacity whatever the costs and intervals.
//
// It is owned by the batcher's loop goroutine.
type credit struct {
	balance int64     // nano-cost; may be negative
	last    time.Time // when the balance was last brought up to date
	rate    uint32    // the capacity it was brought up to date for
}

// accrue brings the balance up to date at now for capacity per second,
// capped at capacity × interval. The first call only records the time.
//
// When waiting is true, operations have been waiting for this credit since
// the last call, so the time since then was not idle: the loop meant to wake
// when the credit was due, and a wake-up that timer slack made a little late
// should not cost capacity: when the balance reached the cap at most
// catchUp before now, what accrued since is kept above the cap. This
// matters most for a batch that costs more than the cap, which waits for
// the balance to reach the cap exactly: without it, every late wake-up
// would forfeit its lateness. A longer absence is a stall (a blocked
// listener, a stopped process, a jump of the clock); the cap stays one
// interval's worth and what accrued beyond it is forfeited, so that after a
// stall the batcher releases one interval's worth at once, not
// stall × capacity, and no one-second window sees more than the capacity,
// one interval's worth (and catchUp's) and the debt of one operation.
func (c *credit) accrue(now time.Time, capacity uint32, interval time.Duration, waiting bool) {
	lowered := capacity < c.rate
	c.rate = capacity
	if c.last.IsZero() {
		c.last = now
		return
	}
	elapsed := now.Sub(c.last)
	if elapsed <= 0 {
		// No time passed, but the capacity may have fallen since (see
		// ProvisionedResource.SetCapacity): the balance never exceeds the
		// cap of the capacity now, so a fall to zero stops releases at once.
		if limit := satMul(uint64(capacity), uint64(interval)); lowered && c.balance > limit {
			c.balance = limit
		}
		return
	}
	c.last = now
	limit := satMul(uint64(capacity), uint64(interval))
	if c.balance >= limit {
		c.balance = limit
		return
	}
	if capacity == 0 {
		return
	}
	// missing cannot overflow: limit < 2^61 and balance > -2^63+2^62.
	missing := uint64(limit - c.balance)
	full := time.Duration((missing + uint64(capacity) - 1) / uint64(capacity)) // until the cap
	if elapsed < full {
		c.balance += int64(capacity) * int64(elapsed) // below missing, so no overflow
		return
	}
	c.balance = limit
	if late := elapsed - full; waiting && late <= catchUp(interval) {
		c.balance += int64(capacity) * int64(late) // at most catchUp's worth
	}
}

// maxCatchUp bounds how much a late wake-up may stretch the credit cap: a few
// milliseconds cover the timer slack of a busy machine, and anything later
// is a stall whose capacity is not made up.
const maxCatchUp = 2 * time.Millisecond

// catchUp returns the largest lateness a wake-up may make up for with the
// given flush interval: maxCatchUp, and never more than the interval itself.
func catchUp(interval time.Duration) time.Duration {
	return min(interval, maxCatchUp)
}

// fill sets the balance to its cap at now, as if the batcher had been idle
// for a flush interval: a batcher that just started may release its first
// interval's worth at once.
func (c *credit) fill(now time.Time, capacity uint32, interval time.Duration) {
	c.balance = satMul(uint64(capacity), uint64(interval))
	c.last, c.rate = now, capacity
}

// spend takes the cost of one operation if the rules allow it: an operation
// of zero cost always passes, one of positive cost needs a positive balance.
func (c *credit) spend(cost uint32) bool {
	return c.spendAbove(cost, 0)
}

// spendAbove is spend with the balance required to be above floor instead
// of zero (floor <= 0).
func (c *credit) spendAbove(cost uint32, floor int64) bool {
	if cost == 0 {
		return true
	}
	if c.balance <= floor {
		return false
	}
	c.balance -= int64(cost) * nanoPerCost
	return true
}

// reaches reports whether the balance is at least need.
func (c *credit) reaches(need int64) bool {
	return c.balance >= need
}

// readyAt returns when the balance will first reach need at capacity per
// second, and false when it never can because need exceeds the cap or the
// capacity is zero.
func (c *credit) readyAt(need int64, capacity uint32, interval time.Duration) (time.Time, bool) {
	if capacity == 0 || need > satMul(uint64(capacity), uint64(interval)) {
		return time.Time{}, false
	}
	missing := need - c.balance
	if missing <= 0 {
		return c.last, true
	}
	wait := (missing + int64(capacity) - 1) / int64(capacity) // nanoseconds, rounded up
	return c.last.Add(time.Duration(wait)), true
}

// satMul multiplies without overflow, saturating at a quarter of the int64
// range so that sums of a few such values stay representable.
func satMul(a, b uint64) int64 {
	return int64(satMulU(a, b))
}

func satMulU(a, b uint64) uint64 {
	const ceiling = math.MaxInt64 / 4
	hi, lo := bits.Mul64(a, b)
	if hi != 0 || lo > ceiling {
		return ceiling
	}
	return lo
}

// maxSettleDebt bounds the debt that reported costs may run up: however
// far off an estimate was, the batcher holds back at most this long.
const maxSettleDebt = time.Minute

// settle charges the credit delta units of cost that released operations
// cost beyond what was spent for them at release (a negative delta refunds
// them). A refund never lifts the balance above the cap, capacity ×
// interval, since idle capacity is not banked either; a charge never takes
// the balance below maxSettleDebt's worth of capacity, or below where it
// already is.
func (c *credit) settle(delta int64, capacity uint32, interval time.Duration) {
	if delta == 0 {
		return
	}
	limit := satMul(uint64(capacity), uint64(interval))
	if delta < 0 {
		refund := satMul(uint64(-delta), uint64(nanoPerCost))
		if c.balance < limit {
			c.balance = min(c.balance+refund, limit)
		}
		return
	}
	floor := min(c.balance, -satMul(uint64(capacity), uint64(maxSettleDebt)))
	charge := satMul(uint64(delta), uint64(nanoPerCost))
	c.balance = max(c.balance-charge, floor)
}
