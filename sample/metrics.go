package main

import (
	"net/http"

	"github.com/costwise/batcher"
	batcherprom "github.com/costwise/batcher/metrics/prometheus"
	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Every replica serves GET /metrics from a registry of its own (its metrics
// field), so that the in-process replicas look to Prometheus like the
// separate pods they stand for. With the library the registry holds the
// batcher's and the shared resource's collectors (package
// metrics/prometheus); without it, it is empty: such a service has nothing
// of the library to report.

// instrument registers the collectors of a replica's batcher and shared
// resource. It must run before the batcher starts: the batcher's
// BatchObserver, which feeds the histograms, cannot be set afterwards.
func (r *replica) instrument(b *batcher.Batcher, lim sharedLimiter) error {
	opts := batcherprom.Options{ConstLabels: prom.Labels{"replica": r.name}}
	if _, err := batcherprom.Register(r.metrics, b, opts); err != nil {
		return err
	}
	_, err := batcherprom.RegisterLimiter(r.metrics, lim, opts)
	return err
}

// mountMetrics serves GET /metrics.
func (r *replica) mountMetrics(mux *http.ServeMux) {
	mux.Handle("GET /metrics", promhttp.HandlerFor(r.metrics, promhttp.HandlerOpts{}))
}
