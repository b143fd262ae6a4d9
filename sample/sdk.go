package main

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The Cosmos DB SDKs retry a throttled request themselves: they wait for the
// retry-after the 429 carries and send it again, at most 9 times
// (MaxRetryAttemptsOnRateLimitedRequests) and while the waits add up to no
// more than 30 s (MaxRetryWaitTimeOnRateLimitedRequests); then the 429
// reaches the caller. A throttled request is not charged any RU, but it
// costs its round trip and the wait, and it uses up the budget. That is all
// a 429 costs in this simulation: nothing else is added.
const (
	sdkMaxRetries   = 9
	sdkMaxRetryWait = 30 * time.Second
)

// errRetryBudget is returned when the SDK's retry budget ran out on 429s.
var errRetryBudget = errors.New("throttled: the retry budget (9 retries, 30 s of waiting) ran out")

// sdkResult is what one call through the SDK's retry policy came to.
type sdkResult struct {
	Throttled int           // 429s met, each one a round trip and a wait
	Waited    time.Duration // time spent waiting for retry-afters
	Err       error         // nil: the request was accepted
}

// sendWithRetries sends one request of ru to st as the SDKs do: a 429 is
// waited out and the request sent again, within the retry budget. A
// transport error or the end of ctx ends it at once.
func sendWithRetries(ctx context.Context, st store, replica string, ru uint32, interactive bool) sdkResult {
	var res sdkResult
	for {
		retry, err := st.Write(ctx, replica, ru, interactive)
		if err != nil {
			res.Err = err
			return res
		}
		if retry == 0 {
			return res
		}
		res.Throttled++
		if res.Throttled > sdkMaxRetries || res.Waited+retry > sdkMaxRetryWait {
			res.Err = fmt.Errorf("%w (%d × 429 in %v)", errRetryBudget, res.Throttled, res.Waited.Round(time.Millisecond))
			return res
		}
		if err := sleep(ctx, retry); err != nil {
			res.Err = err
			return res
		}
		res.Waited += retry
	}
}
