package limitcore

import (
	"strconv"
	"time"
)

// MetricsOptions names a middleware's metrics. The middleware fills in its
// defaults before it hands them to its MetricsProvider.
type MetricsOptions struct {
	// Namespace and Subsystem prefix the metric names; empty means
	// DefaultNamespace and the middleware's default subsystem
	// ("http_limit", "grpc_limit").
	Namespace, Subsystem string
	// ConstLabels are added to every metric. A prometheus.Labels value may
	// be given as it is.
	ConstLabels map[string]string
	// Buckets are the latency histogram's upper bounds in seconds; nil
	// means DefaultBuckets: 50 µs to 1.6 s, doubling.
	Buckets []float64
}

// DefaultBuckets returns the latency histogram's default upper bounds:
// 16 from 50 µs (an in-memory decision) to about 1.6 s (a store timing
// out), doubling.
func DefaultBuckets() []float64 {
	b := make([]float64, 16)
	for i, v := 0, 0.00005; i < len(b); i, v = i+1, v*2 {
		b[i] = v
	}
	return b
}

// Result is what one policy's part of a decision is counted as.
type Result uint8

const (
	// ResultAllowed: the request was admitted.
	ResultAllowed Result = iota
	// ResultDenied: the request was refused by a policy (this one or, in
	// an all-or-nothing decision, another: nothing was spent on this one).
	ResultDenied
	// ResultShadowDenied: the policies denied the request, but shadow mode
	// let it through.
	ResultShadowDenied
	// ResultFailedOpen: the store failed and the request was admitted
	// undecided.
	ResultFailedOpen
	// ResultFailedClosed: the store failed and the request was refused.
	ResultFailedClosed
	// NumResults is the number of results, for tables indexed by Result.
	NumResults
)

var resultNames = [NumResults]string{"allowed", "denied", "shadow_denied", "failed_open", "failed_closed"}

// String returns the result's label value: "allowed", "denied",
// "shadow_denied", "failed_open" or "failed_closed".
func (r Result) String() string {
	if r < NumResults {
		return resultNames[r]
	}
	return "Result(" + strconv.Itoa(int(r)) + ")"
}

// MetricsProvider makes the Recorder of each middleware that is given it
// (Options.MetricsProvider); package promlimit provides one for
// Prometheus. A nil MetricsProvider records nothing, and the middleware
// then reads no clock for the latency.
type MetricsProvider interface {
	// NewRecorder is called once by the middleware's New, with its metric
	// names (defaults filled in) and the names of its policies in order;
	// its error is returned by New as a *ConfigError.
	NewRecorder(names MetricsOptions, policies []string) (Recorder, error)
}

// Recorder receives the measurements of one middleware. Its methods are
// called on every request, from many goroutines at once, and must not
// block.
type Recorder interface {
	// Decision counts one decision of the policy at index policy (in the
	// list given to NewRecorder).
	Decision(policy int, r Result)
	// Duration observes how long deciding one request took, the store's
	// round trip included.
	Duration(d time.Duration)
	// StoreError counts one failure of the store (an error or a timeout).
	StoreError()
}
