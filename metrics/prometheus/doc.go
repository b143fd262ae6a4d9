// Package prometheus exports the state of batchers and rate limiters of
// package batcher as Prometheus metrics, and serves it as JSON for health
// endpoints. Its name clashes with client_golang's, so import it under an
// alias:
//
//	import batcherprom "github.com/costwise/batcher/metrics/prometheus"
//
//	reg := prometheus.NewRegistry()
//	b := batcher.New(batcher.DefaultBufferSize) // a *Batcher: WithRateLimiter returns IBatcher
//	b.WithRateLimiter(rl)
//	if _, err := batcherprom.Register(reg, b, batcherprom.Options{}); err != nil { ... }
//	if _, err := batcherprom.RegisterLimiter(reg, rl, batcherprom.Options{}); err != nil { ... }
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// Nothing is registered globally: collectors go on the registry the caller
// passes. Counters and gauges are read from the Stats snapshots when the
// registry is scraped, so between scrapes the batcher pays only for the two
// histogram observations per released batch. See README.md for the metric
// list and the queries worth graphing.
package prometheus
