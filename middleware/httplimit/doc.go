// Package httplimit is net/http middleware that applies the keyed limits of
// package limit to every request: a func(http.Handler) http.Handler, so it
// fits net/http, chi, gorilla/mux and anything else built on the standard
// handler type.
//
// A Middleware decides one or more policies per request (per client IP, per
// API key, global), all or nothing: a request spends on every policy that
// applies or on none. A denied request gets 429 Too Many Requests with
// Retry-After in whole seconds rounded up and an RFC 9457 problem+json
// body; every response carries rate-limit headers in the format chosen
// (the IETF draft's RateLimit-Policy and RateLimit structured fields by
// default; the older RateLimit-Limit/-Remaining/-Reset trio; the common
// X-RateLimit-* fields; or none), describing the policy closest to its
// limit.
//
// Client addresses come from RemoteAddr, or from X-Forwarded-For or
// Forwarded (RFC 7239) only for requests that came through a trusted proxy,
// taking the rightmost address that is not a trusted proxy; IPv6 addresses
// are grouped by /64. See ClientIP.
//
// The header formatting (HeaderFormat, WriteHeaders, PolicyField,
// RateLimitField, RetryAfter) and the problem bodies (Problem,
// WriteProblem) are exported for services that answer rate-limit questions
// themselves. The failure modes, header formats, client addresses and
// metrics options are package limitcore's, shared with package grpclimit,
// and named here too.
//
// Metrics go to Options.MetricsProvider; package promlimit records them on
// a Prometheus registry (MetricsProvider: promlimit.New(reg)), so that this
// package does not depend on the Prometheus client.
package httplimit
