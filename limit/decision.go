package limit

import "time"

// Reason says why a decision came out as it did.
type Reason uint8

// The reasons.
const (
	// ReasonNone: the cost was spent (or, for a cost of zero, could be).
	ReasonNone Reason = iota
	// ReasonLimited: the cost is over what the key has now; RetryAfter says
	// when it would be allowed.
	ReasonLimited
	// ReasonExceedsLimit: the cost is above what the key could ever admit
	// (more than the capacity, burst or maximum per window); RetryAfter is 0
	// because waiting does not help.
	ReasonExceedsLimit
	// ReasonOtherLimit: in an all-or-nothing decision, this limit would have
	// admitted the cost but another one did not, so nothing was spent.
	ReasonOtherLimit
	// ReasonKeyLimit: the store holds its maximum number of keys and refuses
	// new ones.
	ReasonKeyLimit
	// ReasonFailOpen: the store failed and the failure policy admitted.
	ReasonFailOpen
	// ReasonFailClosed: the store failed and the failure policy denied.
	ReasonFailClosed
	// ReasonFallback: the store failed and the local fallback decided.
	ReasonFallback
)

var reasonNames = [...]string{"", "limited", "cost exceeds limit", "denied by another limit",
	"too many keys", "store failed, admitted", "store failed, denied", "store failed, decided locally"}

// String returns a short lower-case description of r.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// Decision is the answer to one request of a cost against one limit.
type Decision struct {
	// Allowed reports whether the cost was spent.
	Allowed bool
	// Reason says why; ReasonNone when allowed by the store itself.
	Reason Reason
	// Limit is the policy's limit: capacity, burst or maximum per window.
	Limit int64
	// Remaining is the cost that could still be spent at once after this
	// decision, at least 0.
	Remaining int64
	// RetryAfter is, for a decision denied with ReasonLimited, how long until
	// the same cost would be allowed, rounded up to the microsecond (never
	// early); for ReasonFailClosed, when the failure policy asks the store
	// again; 0 otherwise.
	RetryAfter time.Duration
	// ResetAfter is how long until the key is back at rest (a full bucket,
	// empty windows) if nothing more is spent.
	ResetAfter time.Duration
	// Policy is the name of the policy decided.
	Policy string
	// Err is the store failure behind a decision made by a failure policy
	// (ReasonFailOpen, ReasonFailClosed, ReasonFallback); nil otherwise.
	Err error
}

// Combine returns the overall decision of several decided together: allowed
// if all were, RetryAfter the longest, and the Limit, Remaining, ResetAfter
// and Policy of the decision closest to its limit (the lowest share
// remaining; among denied decisions only), which is what response headers
// should describe. When any of them is denied with ReasonExceedsLimit, so
// is the whole, with RetryAfter 0: no wait lets the cost through, whatever
// the others say and in whatever order they come. Combine of no decisions
// is an allowed zero Decision.
func Combine(ds []Decision) Decision {
	if len(ds) == 0 {
		return Decision{Allowed: true}
	}
	best := -1
	allowed, never := true, false
	var retry time.Duration
	var reason Reason
	for i := range ds {
		d := &ds[i]
		if !d.Allowed {
			if allowed || d.Reason != ReasonOtherLimit && reason == ReasonOtherLimit {
				reason = d.Reason
			}
			allowed = false
			never = never || d.Reason == ReasonExceedsLimit
		}
		retry = max(retry, d.RetryAfter)
		if best < 0 || closer(d, &ds[best]) {
			best = i
		}
	}
	out := ds[best]
	out.Allowed, out.RetryAfter = allowed, retry
	if !allowed {
		out.Reason = reason
	}
	if never {
		out.Reason, out.RetryAfter = ReasonExceedsLimit, 0
	}
	return out
}

// closer reports whether a is closer to its limit than b: denied before
// allowed, then the lower share remaining.
func closer(a, b *Decision) bool {
	ad, bd := a.Reason != ReasonNone && !a.Allowed && a.Reason != ReasonOtherLimit,
		b.Reason != ReasonNone && !b.Allowed && b.Reason != ReasonOtherLimit
	if ad != bd {
		return ad
	}
	// a.Remaining/a.Limit < b.Remaining/b.Limit, without division.
	if a.Limit <= 0 || b.Limit <= 0 {
		return a.Remaining < b.Remaining
	}
	return float64(a.Remaining)*float64(b.Limit) < float64(b.Remaining)*float64(a.Limit)
}
