package limitcore

import (
	"fmt"
	"time"
)

// FailMode says what a middleware does with a request when the limit store
// fails: an error, or no answer within the store timeout. The zero value is
// FailOpen.
type FailMode int

const (
	// FailOpen admits the request without rate-limit fields; the failure
	// is counted (result "failed_open") and reported to the failure hook.
	// It is the default: a limiter outage should not become an outage of
	// the service it protects.
	FailOpen FailMode = iota
	// FailClosed refuses the request: 503 Service Unavailable, or
	// codes.Unavailable, with a retry delay.
	FailClosed
	// FailFallback decides the request locally, on a fallback store at
	// each limit divided by the number of replicas (package limit's local
	// fallback), until the store answers again.
	FailFallback
)

// Defaults the middlewares share.
const (
	// DefaultStoreTimeout bounds each decision on a store that is not in
	// memory.
	DefaultStoreTimeout = 100 * time.Millisecond
	// DefaultFailClosedRetryAfter is the retry delay of a fail-closed
	// refusal and how long a failed store is left alone.
	DefaultFailClosedRetryAfter = time.Second
	// DefaultNamespace prefixes the metric names.
	DefaultNamespace = "batcher"
)

// ConfigError reports an invalid option of a middleware.
type ConfigError struct {
	// Field is the option, such as "Policies[1].Name".
	Field string
	// Reason says what is wrong with it.
	Reason string
	// Package is the package whose options are wrong ("httplimit",
	// "grpclimit"); empty means "limitcore".
	Package string
}

// Error returns "PACKAGE: invalid FIELD: REASON".
func (e *ConfigError) Error() string {
	pkg := e.Package
	if pkg == "" {
		pkg = "limitcore"
	}
	return fmt.Sprintf("%s: invalid %s: %s", pkg, e.Field, e.Reason)
}
