package service

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/costwise/batcher/envoyrl"
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

	// The label values a caller chooses are bounded: a domain is its own
	// label only when the rules name it, and past maxSeries label sets a
	// new rule label (a detailed_metric rule's or an override's, which
	// carry the request's values) is counted as otherLabel.
	domains   atomic.Pointer[map[string]bool]
	maxSeries int

	// rl are envoyproxy/ratelimit's statistics under its names.
	rl *rlMetrics
}

// otherLabel stands for the label values not kept as their own.
const otherLabel = "other"

func newMetrics(maxSeries int) *metrics {
	m := &metrics{
		reg:       prometheus.NewRegistry(),
		counters:  map[[4]string]prometheus.Counter{},
		maxSeries: maxSeries,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "limiterd", Name: "decisions_total",
			Help: "Decisions by API (rest, grpc, envoy), Envoy domain (\"other\" for a domain the rules do not name), rule (the algorithm for rest and grpc; \"other\" past limits.max_metric_series label sets) and result.",
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
	m.rl = newRLMetrics(maxSeries, m.knownDomain)
	m.reg.MustRegister(m.decisions, m.latency, m.storeErrors, m.reloads, m.ruleFiles,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(m.rl.collectors()...)
	for _, r := range []string{"success", "failure"} {
		m.reloads.WithLabelValues(r)
	}
	return m
}

// knownDomain reports whether the rules in force name domain.
func (m *metrics) knownDomain(domain string) bool {
	d := m.domains.Load()
	return d != nil && (*d)[domain]
}

// reloaded counts a rule load that succeeded or failed, under limiterd's
// name and envoyproxy/ratelimit's.
func (m *metrics) reloaded(ok bool) {
	if ok {
		m.reloads.WithLabelValues("success").Inc()
		m.rl.loadSuccess.Inc()
		return
	}
	m.reloads.WithLabelValues("failure").Inc()
	m.rl.loadError.Inc()
}

// rulesInForce makes the domains of rules the ones labelled as
// themselves, and the series of its limits exist at 0: envoyproxy/
// ratelimit's, and limiterd_decisions_total's for the results a limit
// can give (within the label bound).
func (m *metrics) rulesInForce(rules *envoyrl.Rules) {
	m.setDomains(rules.Domains())
	m.rl.preset(rules)
	for _, l := range rules.Limits() {
		if l.Unlimited || l.DetailedMetric {
			continue
		}
		over := "over_limit"
		if l.ShadowMode {
			over = "shadow_over_limit"
		}
		for _, result := range []string{"ok", over} {
			m.preset("envoy", l.Domain, l.Rule, result)
		}
	}
}

// preset makes a decision series exist, within the bound.
func (m *metrics) preset(api, domain, rule, result string) {
	k := [4]string{api, domain, rule, result}
	m.countersMu.Lock()
	defer m.countersMu.Unlock()
	if _, ok := m.counters[k]; ok || len(m.counters) >= m.maxSeries {
		return
	}
	m.counters[k] = m.decisions.WithLabelValues(k[0], k[1], k[2], k[3])
}

// memoryKeys publishes the number of keys a memory store holds, as
// limiterd_memory_keys{store=name}.
func (m *metrics) memoryKeys(name string, n func() float64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "limiterd", Name: "memory_keys",
		Help:        "Keys or counters held by an in-memory store (keyed: POST /limit and ratelimiter.v1; envoy; envoy_fallback), at most backends.in_memory.max_keys each.",
		ConstLabels: prometheus.Labels{"store": name},
	}, n))
}

// memoryEvictions publishes the lossy evictions of a memory store (keys
// dropped to make room while they had spent something), as
// limiterd_memory_evictions_total{store=name}.
func (m *metrics) memoryEvictions(name string, n func() float64) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: "limiterd", Name: "memory_evictions_total",
		Help:        "Keys a full in-memory store (keyed; keyed_fallback) dropped to make room while they had spent something: what each had spent is forgotten. Keys back at rest are dropped first and are not counted.",
		ConstLabels: prometheus.Labels{"store": name},
	}, n))
}

// setDomains makes the domains of the rules in force the ones labelled as
// themselves.
func (m *metrics) setDomains(domains []string) {
	set := make(map[string]bool, len(domains))
	for _, d := range domains {
		set[d] = true
	}
	m.domains.Store(&set)
}

// decision counts one decision.
func (m *metrics) decision(api, domain, rule, result string) {
	if domain != "" {
		if d := m.domains.Load(); d == nil || !(*d)[domain] {
			domain = otherLabel
		}
	}
	k := [4]string{api, domain, rule, result}
	m.countersMu.RLock()
	c, ok := m.counters[k]
	full := len(m.counters) >= m.maxSeries
	m.countersMu.RUnlock()
	if !ok && full {
		k[2] = otherLabel
		m.countersMu.RLock()
		c, ok = m.counters[k]
		m.countersMu.RUnlock()
	}
	if !ok {
		c = m.decisions.WithLabelValues(k[0], k[1], k[2], k[3])
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

func (o envoyObserver) StoreError(error) { o.m.envoyStoreError() }

func (o envoyObserver) Limit(domain, rule string, st envoyrl.LimitStats) {
	o.m.rl.limit(domain, rule, st)
}

func (o envoyObserver) GlobalShadowMode() { o.m.rl.globalShadow.Inc() }

func (o envoyObserver) BadRequest() { o.m.rl.callErrors.WithLabelValues("service_error").Inc() }

var _ envoyrl.StatsObserver = envoyObserver{}

// envoyStoreError counts a failure of the Envoy API's store.
func (m *metrics) envoyStoreError() {
	m.storeErrors.WithLabelValues("envoy").Inc()
	m.rl.callErrors.WithLabelValues("redis_error").Inc()
}
