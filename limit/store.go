package limit

import (
	"context"
	"time"
)

// Store keeps the state of every (policy, key) and decides on it. Every
// method is safe for concurrent use. Errors: *PolicyError for an invalid
// policy, *CostError for a negative cost, *StoreError when the backend fails,
// and the context's error unchanged when it ends first.
type Store interface {
	// AllowN spends cost on key under p if the key has it, and says so. A
	// cost of 0 only looks, and is always allowed; a denied decision changes
	// nothing.
	AllowN(ctx context.Context, key string, p Policy, cost int64) (Decision, error)
	// AllowAll decides every request together, atomically: either every cost
	// is spent or none is. It appends one decision per request to out, in
	// order, and returns the extended slice; when one request is denied the
	// others that would have been allowed come back with ReasonOtherLimit.
	// Combine gives the overall answer.
	AllowAll(ctx context.Context, reqs []Request, out []Decision) ([]Decision, error)
	// CountAll counts every request's cost even when it, or another request,
	// is over its limit, and decides each apart: Envoy's rate limit service
	// behaviour. The window algorithms (fixed, sliding) count denied costs;
	// the token bucket, GCRA and rolling window spend only allowed costs.
	CountAll(ctx context.Context, reqs []Request, out []Decision) ([]Decision, error)
	// Settle charges (delta > 0) or refunds (delta < 0) the difference
	// between a cost already decided and the real one. A charge is spent
	// even over the limit (up to one more limit's worth of debt); a refund
	// never takes the key below rest. The decision describes the key after.
	Settle(ctx context.Context, key string, p Policy, delta int64) (Decision, error)
	// Reset brings key back to rest under p.
	Reset(ctx context.Context, key string, p Policy) error
}

// Request is one limit of a decision on several limits.
type Request struct {
	// Key is the limited key: a user, an API key, a tenant, an IP address.
	Key string
	// Policy is the limit.
	Policy Policy
	// Cost is the cost to spend, 0 or more.
	Cost int64
}

// Allow is AllowN with a cost of 1.
func Allow(ctx context.Context, s Store, key string, p Policy) (Decision, error) {
	return s.AllowN(ctx, key, p, 1)
}

// Clock tells the time. Stores that read the application's clock take one
// so that tests can drive time.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
