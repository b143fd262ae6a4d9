package redislimit

import (
	_ "embed"
	"errors"
	"math"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/redis/go-redis/v9"
)

// Allowances on the fixed and sliding windows (DESIGN-allowances.md,
// section 3): a granted unit counts in the window's count at once, a lease
// ends with its window at the latest, and units given back while the
// window lasts come off the count.

//go:embed allowance_window.lua
var allowanceWindowSource string

var allowanceWindowScript = redis.NewScript(allowanceWindowSource)

// lendScript returns the allowance script of alg, or nil when allowances
// do not hold it (the rolling window).
func lendScript(alg limit.Algorithm) *redis.Script {
	switch alg {
	case limit.TokenBucketAlgorithm, limit.GCRAAlgorithm:
		return allowanceScript
	case limit.FixedWindowAlgorithm, limit.SlidingWindowAlgorithm:
		return allowanceWindowScript
	}
	return nil
}

// lendable reports whether keys under alg may be decided from allowances.
func lendable(alg limit.Algorithm) bool { return lendScript(alg) != nil }

// errWindowEnd sends a decision on the one-trip path: too little of the
// key's window is left for an allowance to be worth its call.
var errWindowEnd = errors.New("redislimit: window ends before a lease would pay")

// windowWant caps want, on the window algorithms, at what the key's rate
// spends in the time left in the window (the rest would be forfeit when
// the window ends), and fails with errWindowEnd when less than a quarter
// of a lease is left. The window's position comes from the server's time
// of r's last call plus the local time since: never ahead of the server's.
func (a *allowances) windowWant(r *allowance, now time.Time, rate float64, want, cost int64) (int64, error) {
	if r.p.Algorithm != limit.FixedWindowAlgorithm && r.p.Algorithm != limit.SlidingWindowAlgorithm {
		return want, nil
	}
	if r.sent.IsZero() {
		return want, nil
	}
	w := int64(r.p.Window / time.Microsecond)
	srv := r.server + now.Sub(r.sent).Microseconds()
	left := time.Duration(w-srv%w) * time.Microsecond
	if left < a.lease/4 {
		return 0, errWindowEnd
	}
	spend := int64(math.Ceil(rate * left.Seconds()))
	return max(min(want, spend), cost, 1), nil
}
