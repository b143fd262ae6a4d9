package redislimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/redislimit"
)

// TestMemoryPerKey reports what Redis holds (MEMORY USAGE) for one key of
// each algorithm after one decision, and after ten for the rolling window,
// whose log grows with the decisions in its window.
func TestMemoryPerKey(t *testing.T) {
	redislimit.SkipWithColdLeases(t, "a leased key keeps its lease in its state")
	ctx := context.Background()
	c := connect(t)
	// The store's default prefix, so that the key names are those of
	// production; the test deletes its keys.
	s, _ := redislimit.New(c, redislimit.Options{})
	t.Cleanup(func() {
		c.Del(context.Background(), "limit:{user-1234}:g:gcra", "limit:{user-1234}:g3:gcra", "limit:{user-1234}:t:tb",
			"limit:{user-1234}:f:fw", "limit:{user-1234}:s:sw", "limit:{user-1234}:r:rw", "limit:{user-1234}:r10:rw")
	})
	for _, tc := range []struct {
		p         limit.Policy
		decisions int
		max       int64
	}{
		{limit.GCRA(limit.PerSecond(100), 100).Named("g"), 1, 128},
		{limit.GCRA(limit.Rate{Count: 3, Period: time.Second}, 100).Named("g3"), 1, 160},
		{limit.TokenBucket(100, limit.PerSecond(100)).Named("t"), 1, 160},
		{limit.FixedWindow(100, time.Minute).Named("f"), 1, 160},
		{limit.SlidingWindow(100, time.Minute).Named("s"), 1, 160},
		{limit.RollingWindow(100, time.Minute).Named("r"), 1, 256},
		{limit.RollingWindow(100, time.Minute).Named("r10"), 10, 512},
	} {
		for i := 0; i < tc.decisions; i++ {
			if d, err := s.AllowN(ctx, "user-1234", tc.p, 1); err != nil || !d.Allowed {
				t.Fatalf("%+v %v", d, err)
			}
			time.Sleep(time.Millisecond) // a new entry in the rolling log each time
		}
		key := s.Key("user-1234", tc.p)
		n, err := c.MemoryUsage(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%-15s %2d decisions  %-32s %3d bytes  value %q", tc.p.Algorithm, tc.decisions, key, n, dump(t, c, key))
		if n <= 0 || n > tc.max {
			t.Errorf("%s: MEMORY USAGE %d, want at most %d", tc.p.Name, n, tc.max)
		}
	}
}
