package grpclimit

import (
	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/middleware/internal/engine"
)

// Store is the store the limits are decided on: limit's in-memory store,
// its Redis store, or either wrapped in a failure policy.
type Store = limit.Store

// Policy is one limit a call is checked against: a name, the function that
// finds the call's key, and the limit.
type Policy struct {
	// Name names the policy in the metadata, the status details and the
	// metrics; empty means Limit.Name. Printable ASCII, unique.
	Name string
	// Key finds the call's key; nil means the peer address on a server and
	// the method on a client. An empty key exempts the call.
	Key KeyFunc
	// Limit is the algorithm and its parameters.
	Limit limit.Policy
}

// named returns a copy of ps, each policy's Name and Limit.Name agreeing.
func named(ps []Policy) []Policy {
	out := make([]Policy, len(ps))
	for i, p := range ps {
		p.Name, p.Limit = engine.Named(p.Name, p.Limit)
		out[i] = p
	}
	return out
}
