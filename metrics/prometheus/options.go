package prometheus

import (
	prom "github.com/prometheus/client_golang/prometheus"
)

// DefaultNamespace is the namespace of every metric unless Options says
// otherwise.
const DefaultNamespace = "batcher"

// Options configures a collector. The zero value is ready to use: metrics
// are named under DefaultNamespace, carry no constant labels and use the
// default histogram buckets.
type Options struct {
	// Namespace prefixes every metric name; empty means DefaultNamespace.
	Namespace string
	// ConstLabels are added to every metric, for example {"name": "orders"}
	// to tell two batchers of one process apart. Two collectors registered
	// on one registry must differ in at least one constant label.
	ConstLabels prom.Labels
	// SizeBuckets are the upper bounds of the batch-size histogram, in
	// operations; nil means DefaultSizeBuckets.
	SizeBuckets []float64
	// WaitBuckets are the upper bounds of the wait-time histogram, in
	// seconds; nil means DefaultWaitBuckets.
	WaitBuckets []float64
}

// DefaultSizeBuckets covers batches from a single operation to the largest
// sizes that watchers usually allow (MaxBatchSize in the hundreds).
var DefaultSizeBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}

// DefaultWaitBuckets runs from 1 ms to about 65 s, doubling: waits shorter
// than a millisecond are all "immediate", and the flush interval (100 ms by
// default) and pauses (0.5 s to 4 s) fall well inside the range.
var DefaultWaitBuckets = prom.ExponentialBuckets(0.001, 2, 17)

// namespace returns the namespace to use.
func (o Options) namespace() string {
	if o.Namespace == "" {
		return DefaultNamespace
	}
	return o.Namespace
}

// desc builds the description of a metric in the collector's namespace and
// subsystem, with the constant labels of o.
func (o Options) desc(subsystem, name, help string, labels ...string) *prom.Desc {
	return prom.NewDesc(prom.BuildFQName(o.namespace(), subsystem, name), help, labels, o.ConstLabels)
}

// constMetric returns a constant metric, or an invalid one that makes the
// scrape report err, so that a bad label value (say, an owner id that is
// not UTF-8) fails one scrape instead of panicking.
func constMetric(d *prom.Desc, t prom.ValueType, v float64, labels ...string) prom.Metric {
	m, err := prom.NewConstMetric(d, t, v, labels...)
	if err != nil {
		return prom.NewInvalidMetric(d, err)
	}
	return m
}
