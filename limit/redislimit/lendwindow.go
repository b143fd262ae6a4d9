package redislimit

import (
	_ "embed"
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

// windowLeft returns, on the window algorithms, the time left in r's
// window, from the server's time of r's last call plus the local time
// since (never ahead of the server's); ok is false on the other algorithms
// and before r's first call.
func (a *allowances) windowLeft(r *allowance, now time.Time) (left time.Duration, ok bool) {
	if r.p.Algorithm != limit.FixedWindowAlgorithm && r.p.Algorithm != limit.SlidingWindowAlgorithm {
		return 0, false
	}
	if r.sent.IsZero() {
		return 0, false
	}
	w := int64(r.p.Window / time.Microsecond)
	srv := r.server + now.Sub(r.sent).Microseconds()
	return time.Duration(w-srv%w) * time.Microsecond, true
}
