package grpclimit

import "github.com/costwise/batcher/middleware/limitcore"

// The names below are package limitcore's, which grpclimit and httplimit
// share (httplimit.FailFallback and grpclimit.FailFallback are one
// constant); they are given here so that a gRPC service needs no other
// import.

// FailMode says what an interceptor does with a call when the limit store
// fails: see limitcore.FailMode.
type FailMode = limitcore.FailMode

const (
	// FailOpen admits the call without rate-limit metadata, counted as
	// "failed_open". It is the default.
	FailOpen = limitcore.FailOpen
	// FailClosed refuses the call with codes.Unavailable and a RetryInfo
	// of Options.FailClosedRetryAfter.
	FailClosed = limitcore.FailClosed
	// FailFallback decides the call locally, on Options.Fallback at each
	// limit divided by Options.FallbackReplicas, until the store answers.
	FailFallback = limitcore.FailFallback
)

// HeaderFormat chooses the rate-limit metadata entries: see
// limitcore.HeaderFormat. The zero value is HeaderDraft.
type HeaderFormat = limitcore.HeaderFormat

// The metadata formats.
const (
	// HeaderDraft sends the IETF draft's ratelimit-policy and ratelimit.
	HeaderDraft = limitcore.HeaderDraft
	// HeaderTrio sends ratelimit-limit, ratelimit-remaining and
	// ratelimit-reset.
	HeaderTrio = limitcore.HeaderTrio
	// HeaderX sends x-ratelimit-limit, x-ratelimit-remaining and
	// x-ratelimit-reset (a Unix time).
	HeaderX = limitcore.HeaderX
	// HeaderNone sends no rate-limit metadata.
	HeaderNone = limitcore.HeaderNone
)

// MetricsOptions names an interceptor's metrics: see
// limitcore.MetricsOptions.
type MetricsOptions = limitcore.MetricsOptions

// MetricsProvider makes an interceptor's metrics recorder: see
// limitcore.MetricsProvider; promlimit.New gives one for Prometheus.
type MetricsProvider = limitcore.MetricsProvider

// ConfigError reports an invalid option; its Error is
// "grpclimit: invalid FIELD: REASON".
type ConfigError = limitcore.ConfigError
