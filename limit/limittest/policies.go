package limittest

import (
	"time"

	"github.com/costwise/batcher/limit"
)

// EveryAlgorithm returns one small policy per algorithm, by the name
// limiterd and the middleware's options give the algorithm. Their limits
// and periods are not multiples of one another, so that a client probing
// them at a steady pace is refused at uneven offsets into a period and
// most retry delays are not whole seconds: the cases where rounding a
// delay to whole seconds can go wrong.
func EveryAlgorithm() map[string]limit.Policy {
	return map[string]limit.Policy{
		"token_bucket":   limit.TokenBucket(3, limit.Rate{Count: 2, Period: 3 * time.Second}),
		"gcra":           limit.GCRA(limit.Rate{Count: 3, Period: 7 * time.Second}, 2),
		"fixed_window":   limit.FixedWindow(4, 10*time.Second),
		"rolling_window": limit.RollingWindow(3, 5*time.Second),
		"sliding_window": limit.SlidingWindow(5, 4*time.Second),
	}
}
