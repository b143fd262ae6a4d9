package service

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are limiterd's Prometheus collectors, on their own registry.
type metrics struct {
	reg         *prometheus.Registry
	decisions   *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	storeErrors *prometheus.CounterVec
	reloads     *prometheus.CounterVec
	ruleFiles   prometheus.Gauge

	// counters caches the decision counters by label values, so that a
	// decision does not look its labels up in the vector each time. A
	// typed map: a sync.Map would allocate each key it is asked for.
	countersMu sync.RWMutex
	counters   map[[4]string]prometheus.Counter // guarded by countersMu
	observers  sync.Map                         // api -> prometheus.Observer
}

func newMetrics() *metrics {
	m := &metrics{
		reg:      prometheus.NewRegistry(),
		counters: map[[4]string]prometheus.Counter{},
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "limiterd", Name: "decisions_total",
			Help: "Decisions by API (rest, grpc, envoy), Envoy domain, rule (the algorithm for rest and grpc) and result.",
		}, []string{"api", "domain", "rule", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "limiterd", Name: "decision_duration_seconds",
			Help:    "Time to answer one call, by API.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .1, .5, 1},
		}, []string{"api"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "limiterd", Name: "store_errors_total",
			Help: "Calls whose store failed, by API.",
		}, []string{"api"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "limiterd", Name: "rule_reloads_total",
			Help: "Loads of the Envoy rule directory, by result (success, failure).",
		}, []string{"result"}),
		ruleFiles: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "limiterd", Name: "rule_files",
			Help: "Envoy rule files in force.",
		}),
	}
	m.reg.MustRegister(m.decisions, m.latency, m.storeErrors, m.reloads, m.ruleFiles,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// decision counts one decision.
func (m *metrics) decision(api, domain, rule, result string) {
	k := [4]string{api, domain, rule, result}
	m.countersMu.RLock()
	c, ok := m.counters[k]
	m.countersMu.RUnlock()
	if !ok {
		c = m.decisions.WithLabelValues(api, domain, rule, result)
		m.countersMu.Lock()
		m.counters[k] = c
		m.countersMu.Unlock()
	}
	c.Inc()
}

// observe records a call's duration.
func (m *metrics) observe(api string, start time.Time) {
	o, ok := m.observers.Load(api)
	if !ok {
		o, _ = m.observers.LoadOrStore(api, m.latency.WithLabelValues(api))
	}
	o.(prometheus.Observer).Observe(time.Since(start).Seconds())
}

// envoyObserver feeds the Envoy service's decisions into the metrics.
type envoyObserver struct{ m *metrics }

func (o envoyObserver) Descriptor(domain, rule, result string) {
	o.m.decision("envoy", domain, rule, result)
}

func (o envoyObserver) StoreError(error) { o.m.storeErrors.WithLabelValues("envoy").Inc() }
