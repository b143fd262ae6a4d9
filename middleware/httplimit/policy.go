package httplimit

import (
	"github.com/costwise/batcher/limit"
)

// Store is the store the limits are decided on: limit's in-memory store,
// its Redis store (package limit/redislimit), or either wrapped in a
// failure policy.
type Store = limit.Store

// Policy is one limit a request is checked against: a name, the function
// that finds the request's key, and the limit.
type Policy struct {
	// Name names the policy in the rate-limit headers, the problem body and
	// the metrics ("per-ip"); empty means Limit.Name. It must be printable
	// ASCII, and unique within a middleware. It is also the policy's name in
	// the store, so two middlewares with a policy of the same name and limit
	// share the budget.
	Name string
	// Key finds the request's key; nil means the client IP (KeyIP with
	// Options.ClientIP). An empty key exempts the request from the policy.
	Key KeyFunc
	// Limit is the algorithm and its parameters, such as
	// limit.GCRA(limit.PerMinute(100), 20).
	Limit limit.Policy
}
