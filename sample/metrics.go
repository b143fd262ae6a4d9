package main

import (
	"net/http"

	"github.com/costwise/batcher"
)

// METRICS: this file is the one place where Prometheus would be wired into
// the replicas. instrument is called with each replica's batcher and shared
// resource before the batcher starts (a BatchObserver must be set before
// Start); mountMetrics adds GET /metrics to the replica's HTTP server.

// instrument prepares the metrics of a replica's batcher and limiter.
func (r *replica) instrument(b *batcher.Batcher, lim sharedLimiter) error {
	_, _ = b, lim
	return nil
}

// mountMetrics serves GET /metrics.
func (r *replica) mountMetrics(mux *http.ServeMux) {
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "metrics are not wired in this build of the sample", http.StatusNotImplemented)
	})
}
