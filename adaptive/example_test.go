package adaptive_test

import (
	"context"
	"fmt"
	"time"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/adaptive"
	"github.com/costwise/batcher/batchertest"
)

// A batcher that shares its Cosmos DB container with clients it cannot see
// learns from the 429s how much of the 10,000 RU/s it may really use.
func Example() {
	clock := batchertest.NewFakeClock(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter := adaptive.New(batcher.NewProvisionedResource(10000)).WithClock(clock)
	b := batcher.NewBatcher().WithRateLimiter(limiter)
	// Code that reports a 429 with b.Pause() lowers the capacity this way too.
	b.AddListener(limiter.Listener())
	if err := limiter.Provision(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("at first:", limiter.Capacity())

	// The datastore answered 429 with a retry-after of 500 ms.
	limiter.Throttled(500 * time.Millisecond)
	fmt.Println("after a 429:", limiter.Capacity())

	// Ten seconds later: one second of cooldown, then 1 % back per second.
	clock.Advance(10 * time.Second)
	fmt.Println("ten seconds later:", limiter.Capacity())
	// Output:
	// at first: 10000
	// after a 429: 9000
	// ten seconds later: 9900
}
