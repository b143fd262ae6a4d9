package redislimit

import (
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
)

// TestTakeGrid: a policy's take grid is the shortest whole fraction of its
// period from 200 ms to 1 s over which 16 units or more refill, and no
// more than half the burst; or none.
func TestTakeGrid(t *testing.T) {
	for _, c := range []struct {
		p    limit.Policy
		want time.Duration
	}{
		{limit.TokenBucket(1000, limit.PerSecond(1000)), 200 * time.Millisecond},
		{limit.GCRA(limit.PerSecond(1000), 10), 0},                       // 200 ms would refill 20 times the burst
		{limit.GCRA(limit.PerSecond(1000), 400), 200 * time.Millisecond}, // 200 units: half the burst
		{limit.TokenBucket(100, limit.PerSecond(100)), 200 * time.Millisecond},
		{limit.TokenBucket(100, limit.PerSecond(50)), 500 * time.Millisecond},
		{limit.TokenBucket(100, limit.Rate{Count: 100, Period: 150 * time.Millisecond}), 0}, // 3 does not divide a second
		{limit.TokenBucket(20, limit.PerSecond(20)), 0},                                     // 1 s would refill the burst
		{limit.TokenBucket(40, limit.PerSecond(20)), time.Second},                           // 20 units a second
		{limit.TokenBucket(100, limit.PerSecond(1000)), 0},                                  // 200 ms would refill 200
		{limit.TokenBucket(60, limit.PerSecond(60)), 500 * time.Millisecond},                // 1/3 s is not whole µs
		{limit.TokenBucket(10, limit.PerSecond(10)), 0},                                     // under 16 units a second
		{limit.TokenBucket(600, limit.Rate{Count: 600, Period: 2 * time.Second}), 200 * time.Millisecond},
		{limit.TokenBucket(60000, limit.PerMinute(60000)), 200 * time.Millisecond},
		{limit.TokenBucket(600, limit.PerMinute(600)), 0},                                // 1 s would refill 10
		{limit.TokenBucket(5, limit.Rate{Count: 500, Period: 50 * time.Millisecond}), 0}, // period under 200 ms
		{limit.FixedWindow(1000, time.Second), 0},
		{limit.SlidingWindow(1000, time.Second), 0},
	} {
		if got := takeGrid(c.p); got != c.want {
			t.Errorf("%+v: grid %v, want %v", c.p, got, c.want)
		}
	}
}
