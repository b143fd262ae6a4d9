package httplimit

import (
	"net/http"
	"net/netip"
	"time"

	"github.com/costwise/batcher/middleware/limitcore"
)

// The names below are package limitcore's, which httplimit and grpclimit
// share; they are given here too so that a program using the middleware
// needs no other import.

// FailMode says what the middleware does with a request when the limit
// store fails (an error, or no answer within Options.StoreTimeout): see
// limitcore.FailMode.
type FailMode = limitcore.FailMode

const (
	// FailOpen admits the request without rate-limit headers; the failure
	// is counted (result "failed_open") and reported to
	// Options.OnStoreFailure. It is the default.
	FailOpen = limitcore.FailOpen
	// FailClosed refuses the request with 503 Service Unavailable,
	// Retry-After (Options.FailClosedRetryAfter) and a problem body.
	FailClosed = limitcore.FailClosed
	// FailFallback decides the request locally, on Options.Fallback at
	// each limit divided by Options.FallbackReplicas (package limit's
	// local fallback), until the store answers again.
	FailFallback = limitcore.FailFallback
)

// MetricsOptions names a middleware's metrics: see limitcore.MetricsOptions.
type MetricsOptions = limitcore.MetricsOptions

// MetricsProvider makes the middleware's metrics recorder: see
// limitcore.MetricsProvider; promlimit.New gives one for Prometheus.
type MetricsProvider = limitcore.MetricsProvider

// ConfigError reports an invalid Options field; its Error is
// "httplimit: invalid FIELD: REASON".
type ConfigError = limitcore.ConfigError

// HeaderFormat chooses which rate-limit header fields a response carries:
// see limitcore.HeaderFormat. The zero value is HeaderDraft.
type HeaderFormat = limitcore.HeaderFormat

// The header formats.
const (
	// HeaderDraft writes the IETF draft's RateLimit-Policy and RateLimit.
	HeaderDraft = limitcore.HeaderDraft
	// HeaderTrio writes RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset.
	HeaderTrio = limitcore.HeaderTrio
	// HeaderX writes X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (a Unix time).
	HeaderX = limitcore.HeaderX
	// HeaderNone writes no rate-limit fields.
	HeaderNone = limitcore.HeaderNone
)

// UnknownFormatError reports a name ParseHeaderFormat does not know.
type UnknownFormatError = limitcore.UnknownFormatError

// ParseHeaderFormat returns the format named s ("draft", "trio", "x",
// "none"; "" means "draft"): see limitcore.ParseHeaderFormat.
func ParseHeaderFormat(s string) (HeaderFormat, error) { return limitcore.ParseHeaderFormat(s) }

// Status is what the headers say about one policy for one request: see
// limitcore.Status.
type Status = limitcore.Status

// Closest returns the index of the status the headers should describe: see
// limitcore.Closest.
func Closest(statuses []Status) int { return limitcore.Closest(statuses) }

// WriteHeaders sets the rate-limit fields of format f on h, describing the
// status closest to its limit: see limitcore.WriteHeaders.
func WriteHeaders(h http.Header, f HeaderFormat, now time.Time, statuses ...Status) {
	limitcore.WriteHeaders(h, f, now, statuses...)
}

// Seconds returns d in whole seconds rounded up, never negative.
func Seconds(d time.Duration) int64 { return limitcore.Seconds(d) }

// RetryAfter sets Retry-After on h to d in whole seconds rounded up; it
// sets nothing when d is not positive.
func RetryAfter(h http.Header, d time.Duration) { limitcore.RetryAfter(h, d) }

// PolicyField returns one item of the draft's RateLimit-Policy field: see
// limitcore.PolicyField.
func PolicyField(policy string, quota int64, window time.Duration) string {
	return limitcore.PolicyField(policy, quota, window)
}

// RateLimitField returns one item of the draft's RateLimit field: see
// limitcore.RateLimitField.
func RateLimitField(policy string, remaining int64, reset time.Duration) string {
	return limitcore.RateLimitField(policy, remaining, reset)
}

// ValidPolicyName reports whether name is non-empty printable ASCII.
func ValidPolicyName(name string) bool { return limitcore.ValidPolicyName(name) }

// ClientIP finds the address of the client that sent a request: see
// limitcore.ClientIP.
type ClientIP = limitcore.ClientIP

// ProxyHeader chooses which header a trusted proxy reports the client in.
type ProxyHeader = limitcore.ProxyHeader

// The proxy headers.
const (
	// ProxyHeaderAuto reads Forwarded when present, else X-Forwarded-For.
	ProxyHeaderAuto = limitcore.ProxyHeaderAuto
	// ProxyHeaderXFF reads only X-Forwarded-For.
	ProxyHeaderXFF = limitcore.ProxyHeaderXFF
	// ProxyHeaderForwarded reads only Forwarded (RFC 7239).
	ProxyHeaderForwarded = limitcore.ProxyHeaderForwarded
)

// DefaultIPv6Prefix is the prefix length IPv6 clients are grouped by.
const DefaultIPv6Prefix = limitcore.DefaultIPv6Prefix

// InvalidPrefixError reports a prefix length out of range for its family.
type InvalidPrefixError = limitcore.InvalidPrefixError

// ParsePrefixes parses CIDRs and single addresses for
// ClientIP.TrustedProxies: see limitcore.ParsePrefixes.
func ParsePrefixes(cidrs ...string) ([]netip.Prefix, error) { return limitcore.ParsePrefixes(cidrs...) }
