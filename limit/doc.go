// Package limit decides keyed admission limits: whether a caller (a user, an
// API key, a tenant, an IP address) may spend a cost now, under one of five
// algorithms, in memory or in a shared store.
//
// # Model
//
// A Policy names an algorithm and its parameters. A Store keeps one state per
// (policy, key) and answers AllowN: a Decision saying whether the cost was
// spent, the limit, what remains, when the cost would be allowed (RetryAfter)
// and when the key is back at rest (ResetAfter). Every decision spends an
// integer cost of zero or more; a cost of zero only looks. A denied decision
// changes nothing. A key that was never seen, or whose state is back at rest,
// decides as a fresh key: a full bucket, empty windows.
//
// The algorithms:
//
//	token_bucket    capacity, rate: refills rate tokens per period up to capacity
//	gcra            rate per period, burst: the leaky bucket as a meter; one timestamp
//	fixed_window    window, max: counts per window aligned to the Unix epoch
//	rolling_window  window, max: the exact sliding log of the costs in the window
//	sliding_window  window, max: weighted previous and current counts; approximate
//
// All arithmetic is on integers: time in microseconds, rates as a count per
// period, so a rate of 0.1 tokens per second is exactly 1 per 10 s and no
// float drift accumulates. A cost above what the key could ever admit is
// denied with ReasonExceedsLimit and no RetryAfter.
//
// Several limits can be decided together with AllowAll: all of them spend or
// none does. Settle charges or refunds the difference between an estimate
// and the real cost, never below rest. CountAll counts every cost whatever
// the outcome, as Envoy's rate limit service does.
//
// # Stores
//
// NewMemory returns a sharded in-memory store, bounded in keys. The package
// redislimit keeps the states in Redis, one round trip per decision.
// WithFailurePolicy wraps a store whose backend may fail or hang: past its
// timeout a call is a failure, and failures are decided by the failure mode,
// FailOpen, FailClosed or FailFallback (the local fallback: decide on a
// local store at a fraction of the limit). After a failure the store is left
// alone for a probe window, then probed by one call at a time. envoyrl's
// WithFailurePolicy is the same policy for Envoy's counters, and the
// middlewares' OnStoreError and limiterd's on_store_failure choose among the
// same three modes.
//
// Fractional costs: scale the policy with Policy.Scale (for example by 1000
// for thousandths of a token) and express costs in the same unit;
// CostFromFloat converts. One unit is the resolution of every store, memory
// and Redis alike: a fractional cost is rounded up to the next whole unit,
// so a positive cost below one unit is charged one unit, never nothing.
package limit
