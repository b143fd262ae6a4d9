// Package batchctx bounds a batch of calls sent to a store as one request.
// A batch lasts until the latest deadline among its calls, since each call
// waits only as long as its own, and never longer than a fixed bound.
package batchctx

import (
	"context"
	"time"
)

// Deadliner is what a batch's call tells of its deadline.
type Deadliner interface {
	Deadline() (deadline time.Time, ok bool)
}

// For returns a context that ends at the latest deadline of calls, or
// after bound when that is sooner or when a call has none. Its calls' own
// cancellations do not end it: the batch serves the others too.
func For[T Deadliner](calls []T, bound time.Duration) (context.Context, context.CancelFunc) {
	limit := time.Now().Add(bound)
	var latest time.Time
	for _, c := range calls {
		d, ok := c.Deadline()
		if !ok {
			latest = limit
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	if latest.After(limit) {
		latest = limit
	}
	return context.WithDeadline(context.Background(), latest)
}
