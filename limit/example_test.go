package limit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/costwise/batcher/limit"
)

// fixedClock is a clock standing still, so that the example's output does
// not depend on when it runs.
type fixedClock struct{ t time.Time }

func (c *fixedClock) Now() time.Time { return c.t }

func Example() {
	clock := &fixedClock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	store, err := limit.NewMemory(limit.MemoryOptions{Clock: clock})
	if err != nil {
		panic(err)
	}
	perUser := limit.TokenBucket(3, limit.PerSecond(1)).Named("per-user")
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		d, _ := limit.Allow(ctx, store, "alice", perUser)
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter)
	}
	clock.t = clock.t.Add(time.Second)
	d, _ := limit.Allow(ctx, store, "alice", perUser)
	fmt.Println(d.Allowed, d.Remaining)
	// Output:
	// true 2 0s 1s
	// true 1 0s 2s
	// true 0 0s 3s
	// false 0 1s 3s
	// true 0
}
