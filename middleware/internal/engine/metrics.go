package engine

import (
	"errors"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
)

// Decision results, the values of the result label.
const (
	resultAllowed = iota
	resultDenied
	resultShadowDenied
	resultFailedOpen
	resultFailedClosed
	numResults
)

// ResultNames are the values of the result label, in index order.
var ResultNames = [numResults]string{"allowed", "denied", "shadow_denied", "failed_open", "failed_closed"}

// Metrics counts decisions. A nil *Metrics counts nothing.
type Metrics struct {
	decisions [][numResults]prom.Counter // by policy index
	latency   prom.Observer
	storeErrs prom.Counter
}

// MetricsOptions names the metrics.
type MetricsOptions struct {
	Namespace   string
	Subsystem   string
	ConstLabels prom.Labels
	Buckets     []float64
}

// DefaultBuckets spans 50 µs (an in-memory decision) to about 1.6 s (a
// store timing out), doubling.
var DefaultBuckets = prom.ExponentialBuckets(0.00005, 2, 16)

// NewMetrics registers the decision counters, the latency histogram and
// the store-error counter on reg, or reuses those already registered there
// under the same names and labels, and binds the counters of policies.
func NewMetrics(reg prom.Registerer, o MetricsOptions, policies []string) (*Metrics, error) {
	if o.Buckets == nil {
		o.Buckets = DefaultBuckets
	}
	dec, err := register(reg, prom.NewCounterVec(prom.CounterOpts{
		Namespace: o.Namespace, Subsystem: o.Subsystem, Name: "decisions_total", ConstLabels: o.ConstLabels,
		Help: "Rate-limit decisions by policy and result (allowed, denied, shadow_denied, failed_open, failed_closed).",
	}, []string{"policy", "result"}))
	if err != nil {
		return nil, err
	}
	lat, err := register(reg, prom.NewHistogram(prom.HistogramOpts{
		Namespace: o.Namespace, Subsystem: o.Subsystem, Name: "decision_duration_seconds", ConstLabels: o.ConstLabels,
		Help: "Time taken to decide a request's policies, store round trip included.", Buckets: o.Buckets,
	}))
	if err != nil {
		return nil, err
	}
	errs, err := register(reg, prom.NewCounter(prom.CounterOpts{
		Namespace: o.Namespace, Subsystem: o.Subsystem, Name: "store_errors_total", ConstLabels: o.ConstLabels,
		Help: "Decisions the limit store failed to make (errors and timeouts).",
	}))
	if err != nil {
		return nil, err
	}
	m := &Metrics{latency: lat, storeErrs: errs, decisions: make([][numResults]prom.Counter, len(policies))}
	for i, p := range policies {
		for r := range numResults {
			m.decisions[i][r] = dec.WithLabelValues(p, ResultNames[r])
		}
	}
	return m, nil
}

// register registers c on reg, or returns the collector of the same
// description already there, so two middlewares can share one registry.
func register[C prom.Collector](reg prom.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var are prom.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

func (m *Metrics) count(policy, result int) {
	if m != nil {
		m.decisions[policy][result].Inc()
	}
}

func (m *Metrics) observe(d time.Duration) {
	if m != nil {
		m.latency.Observe(d.Seconds())
	}
}

func (m *Metrics) storeError() {
	if m != nil {
		m.storeErrs.Inc()
	}
}
