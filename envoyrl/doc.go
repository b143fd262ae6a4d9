// Package envoyrl answers Envoy's external rate limit protocol
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) with the
// rule files and the counting of envoyproxy/ratelimit, its reference
// implementation, so that gateways can switch to this service without
// changing their rules or seeing other numbers.
//
// Rules (Parse, LoadDir) are YAML files with a domain and a tree of
// descriptors; a request's descriptor matches, level by level, an entry's
// key_value first, then a wildcard value ending in '*', then the key alone.
// Each matched limit is a fixed window aligned to its unit (second, minute,
// hour, day, week, month = 30 days, year = 365 days) since the Unix epoch,
// counted under a key of the domain, the descriptor's entries and the
// window's start. Every descriptor of a request is counted, even when
// another is over its limit, unless Options.StopIncrementWhenOverLimit is
// set. hits_addend is the cost (0 means 1); unlimited descriptors are never
// counted; shadow_mode limits are counted but answer OK; a limit's
// replaces removes the named limits from the request; share_threshold makes
// every value matching a wildcard count on one counter.
//
// As envoyproxy/ratelimit, the service can keep the counters found over
// their limit in a bounded local cache and answer them without the store
// until their window ends (Options.LocalCacheBytes), ask Envoy to add rate
// limit headers to the client's response (Options.ResponseHeaders), report
// its per-limit statistics, near-limit hits included, to a StatsObserver,
// and merge the files of one domain (ParseWith); Rules.Dump lists the
// rules as its /rlconfig does.
//
// The counters live in a Store: MemoryStore here, Redis in the redisstore
// package. WithFailurePolicy wraps a store that may fail or hang in the
// failure policy of package limit, with its three modes (FailOpen,
// FailClosed, FailFallback), its timeout and its half-open probe.
package envoyrl
