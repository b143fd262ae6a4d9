package limit

import (
	"math/bits"
	"time"
)

// Algorithm names a limiting algorithm. Its values are the names used in
// configuration files.
type Algorithm string

// The algorithms.
const (
	// TokenBucketAlgorithm refills Rate tokens per period up to Limit (the
	// capacity); a fresh key holds Limit tokens.
	TokenBucketAlgorithm Algorithm = "token_bucket"
	// GCRAAlgorithm is the generic cell rate algorithm (the leaky bucket as a
	// meter): one emission per Rate period, with a burst of Limit at once.
	GCRAAlgorithm Algorithm = "gcra"
	// FixedWindowAlgorithm admits at most Limit per Window, the windows
	// aligned to multiples of Window since the Unix epoch.
	FixedWindowAlgorithm Algorithm = "fixed_window"
	// RollingWindowAlgorithm admits at most Limit in any Window ending now,
	// keeping the time of every admitted cost (a sliding log): exact, with
	// memory growing with Limit.
	RollingWindowAlgorithm Algorithm = "rolling_window"
	// SlidingWindowAlgorithm estimates the cost in the Window ending now as
	// the current fixed window's count plus the previous one's, weighted by
	// its overlap: two counts per key, approximate.
	SlidingWindowAlgorithm Algorithm = "sliding_window"
)

// Algorithms lists every algorithm, in the order of the package doc.
var Algorithms = []Algorithm{TokenBucketAlgorithm, GCRAAlgorithm, FixedWindowAlgorithm,
	RollingWindowAlgorithm, SlidingWindowAlgorithm}

// Rate is Count per Period, kept as two integers so that decimal and
// fractional rates are exact.
type Rate struct {
	// Count is the number of tokens (or emissions) per Period.
	Count int64
	// Period is the time over which Count accrues.
	Period time.Duration
}

// PerSecond returns a rate of n per second.
func PerSecond(n int64) Rate { return Rate{Count: n, Period: time.Second} }

// PerMinute returns a rate of n per minute.
func PerMinute(n int64) Rate { return Rate{Count: n, Period: time.Minute} }

// PerHour returns a rate of n per hour.
func PerHour(n int64) Rate { return Rate{Count: n, Period: time.Hour} }

// Every returns a rate of one per interval d.
func Every(d time.Duration) Rate { return Rate{Count: 1, Period: d} }

// Policy is a limit: an algorithm and its parameters. Policy is a comparable
// value; two policies with equal fields share their states in a store. The
// zero value is not valid; use the constructors or fill the fields that
// Algorithm needs.
type Policy struct {
	// Name identifies the policy in store keys and in response headers
	// ("per-ip"). It may be empty for a single policy.
	Name string
	// Algorithm selects the algorithm.
	Algorithm Algorithm
	// Limit is the capacity (token_bucket), the burst (gcra) or the
	// maximum cost per window (the window algorithms). It must be positive.
	Limit int64
	// Rate is the refill rate (token_bucket) or the emission rate (gcra).
	// The window algorithms ignore it.
	Rate Rate
	// Window is the window size of the window algorithms, a whole number of
	// microseconds. The token bucket and GCRA ignore it.
	Window time.Duration
}

// TokenBucket returns a token bucket policy holding up to capacity tokens,
// refilled at rate.
func TokenBucket(capacity int64, rate Rate) Policy {
	return Policy{Algorithm: TokenBucketAlgorithm, Limit: capacity, Rate: rate}
}

// GCRA returns a GCRA policy that admits rate, with burst requests at once.
func GCRA(rate Rate, burst int64) Policy {
	return Policy{Algorithm: GCRAAlgorithm, Limit: burst, Rate: rate}
}

// FixedWindow returns a policy admitting max per window, windows aligned to
// the Unix epoch.
func FixedWindow(max int64, window time.Duration) Policy {
	return Policy{Algorithm: FixedWindowAlgorithm, Limit: max, Window: window}
}

// RollingWindow returns a sliding-log policy admitting max in any window.
func RollingWindow(max int64, window time.Duration) Policy {
	return Policy{Algorithm: RollingWindowAlgorithm, Limit: max, Window: window}
}

// SlidingWindow returns a weighted two-window policy admitting about max in
// any window.
func SlidingWindow(max int64, window time.Duration) Policy {
	return Policy{Algorithm: SlidingWindowAlgorithm, Limit: max, Window: window}
}

// Named returns a copy of p with the given name.
func (p Policy) Named(name string) Policy {
	p.Name = name
	return p
}

// maxUnits bounds every product of the arithmetic (a capacity times a
// period in microseconds, a count times a window), so that no int64
// overflows and the Redis scripts, whose numbers are doubles, stay exact
// (doubles hold integers exactly up to 2^53).
const maxUnits = 1 << 50

// Validate reports whether p is usable, as a *PolicyError naming the field.
func (p Policy) Validate() error {
	_, err := p.params()
	return err
}

// Scale returns p with its limit and rate multiplied by factor, so that costs
// can be given in fractions of a unit: with factor 1000 a cost of 1500 is 1.5
// tokens. Decisions of the scaled policy count in the scaled unit.
func (p Policy) Scale(factor int64) (Policy, error) {
	if factor <= 0 {
		return p, &PolicyError{Policy: p.Name, Field: "scale", Reason: "must be positive"}
	}
	hi, lo := bits.Mul64(uint64(p.Limit), uint64(factor))
	if hi != 0 || lo > maxUnits {
		return p, &PolicyError{Policy: p.Name, Field: "scale", Reason: "limit times scale is too large"}
	}
	p.Limit = int64(lo)
	if p.Algorithm == TokenBucketAlgorithm || p.Algorithm == GCRAAlgorithm {
		hi, lo = bits.Mul64(uint64(p.Rate.Count), uint64(factor))
		if hi != 0 || lo > maxUnits {
			return p, &PolicyError{Policy: p.Name, Field: "scale", Reason: "rate times scale is too large"}
		}
		p.Rate.Count = int64(lo)
	}
	return p, p.Validate()
}

// Divide returns p with its limit and rate divided by n (at least 1 is
// kept), the share of one of n replicas that decide apart: the local
// fallback of WithFailurePolicy.
func (p Policy) Divide(n int) Policy {
	if n <= 1 {
		return p
	}
	p.Limit = max(1, p.Limit/int64(n))
	if p.Algorithm == TokenBucketAlgorithm || p.Algorithm == GCRAAlgorithm {
		p.Rate.Period *= time.Duration(n)
	}
	return p
}
