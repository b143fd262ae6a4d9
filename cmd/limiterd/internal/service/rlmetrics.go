package service

import (
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/costwise/batcher/envoyrl"
)

// rlMetrics are envoyproxy/ratelimit's statistics under the names and
// labels its Prometheus sink gives them (its statsd-exporter mapping), so
// that dashboards and alerts made for it read limiterd:
//
//	ratelimit_service_rate_limit_{total_hits,within_limit,near_limit,over_limit,shadow_mode,over_limit_with_local_cache}
//	    {domain, key1[, key2]}: one series per limit, labelled with the
//	    first components of its statistics key domain.key_value.key_value…
//	    (':' and '|' made '_', as are the dots of an IPv4 address), key2
//	    only when the key has a second descriptor level; deeper levels are
//	    counted in their second level's series, as the mapping does.
//	ratelimit_service_should_rate_limit_error{err_type}: redis_error (the
//	    store failed), service_error (a request refused).
//	ratelimit_service_total_requests{grpc_method}, ratelimit_service_response_time_seconds{grpc_method}:
//	    ShouldRateLimit calls on gRPC.
//	ratelimit_service_config_load_success, ratelimit_service_config_load_error: rule loads.
//	ratelimit_service_global_shadow_mode: answers the global shadow mode turned to OK.
//
// The mapping leaves over_limit_with_local_cache unmapped (it is exported
// under a name that holds the domain and key); here it has the labels of
// the others. The label values are bounded as limiterd_decisions_total's
// are: a domain the rules do not name is "other", and past
// limits.max_metric_series statistics keys a new key is counted as
// key1="other" of its domain.
type rlMetrics struct {
	maxSeries int
	known     func(domain string) bool

	// byKey maps a statistics key (the rule label) to its series: read
	// without a lock, written under mu, at most maxSeries keys (nKeys).
	byKey sync.Map
	nKeys atomic.Int64

	mu       sync.RWMutex
	byLabels map[[3]string]*rlSeries // guarded by mu
	over     map[string]*rlSeries    // domain -> its keys past the bound; guarded by mu

	descs [rlCounters][2]*prometheus.Desc // per counter: {domain,key1} and {domain,key1,key2}

	callErrors   *prometheus.CounterVec
	requests     *prometheus.CounterVec
	responseTime *prometheus.HistogramVec
	loadSuccess  prometheus.Counter
	loadError    prometheus.Counter
	globalShadow prometheus.Counter
}

// The per-limit counters, in LimitStats order.
const rlCounters = 6

var rlCounterNames = [rlCounters]string{"total_hits", "within_limit", "near_limit", "over_limit", "over_limit_with_local_cache", "shadow_mode"}

// rlSeries is one label set's counters.
type rlSeries struct {
	labels [3]string
	deep   bool // has key2
	c      [rlCounters]atomic.Uint64
}

func (s *rlSeries) add(st envoyrl.LimitStats) {
	for i, v := range [rlCounters]uint64{st.TotalHits, st.WithinLimit, st.NearLimit, st.OverLimit, st.OverLimitWithLocalCache, st.ShadowMode} {
		if v != 0 {
			s.c[i].Add(v)
		}
	}
}

func newRLMetrics(maxSeries int, known func(string) bool) *rlMetrics {
	r := &rlMetrics{
		maxSeries: maxSeries, known: known,
		byLabels: map[[3]string]*rlSeries{}, over: map[string]*rlSeries{},
		callErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_service_should_rate_limit_error",
			Help: "envoyproxy/ratelimit's name: Envoy calls that failed, by err_type (redis_error: the store; service_error: the request).",
		}, []string{"err_type"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_service_total_requests",
			Help: "envoyproxy/ratelimit's name: gRPC calls of the Envoy API, by method.",
		}, []string{"grpc_method"}),
		responseTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ratelimit_service_response_time_seconds",
			Help: "envoyproxy/ratelimit's name: time to answer a gRPC call of the Envoy API, by method.",
		}, []string{"grpc_method"}),
		loadSuccess: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_service_config_load_success", Help: "envoyproxy/ratelimit's name: rule sets loaded.",
		}),
		loadError: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_service_config_load_error", Help: "envoyproxy/ratelimit's name: rule sets refused or unreadable.",
		}),
		globalShadow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_service_global_shadow_mode", Help: "envoyproxy/ratelimit's name: answers the global shadow mode turned from OVER_LIMIT to OK.",
		}),
	}
	for i, name := range rlCounterNames {
		fq := "ratelimit_service_rate_limit_" + name
		help := "envoyproxy/ratelimit's name: hits on a limit (" + name + "), by domain and the first descriptor levels of the limit's key."
		r.descs[i] = [2]*prometheus.Desc{
			prometheus.NewDesc(fq, help, []string{"domain", "key1"}, nil),
			prometheus.NewDesc(fq, help, []string{"domain", "key1", "key2"}, nil),
		}
	}
	for _, e := range []string{"redis_error", "service_error"} {
		r.callErrors.WithLabelValues(e)
	}
	r.requests.WithLabelValues("ShouldRateLimit")
	r.responseTime.WithLabelValues("ShouldRateLimit")
	return r
}

// collectors returns what to register: the per-limit series (an unchecked
// collector, since their label sets differ) and the others.
func (r *rlMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{rlCollector{r}, r.callErrors, r.requests, r.responseTime, r.loadSuccess, r.loadError, r.globalShadow}
}

// rlCollector collects the per-limit series.
type rlCollector struct{ r *rlMetrics }

// Describe describes nothing: the series have two label sets under one
// name, which only an unchecked collector may give.
func (rlCollector) Describe(chan<- *prometheus.Desc) {}

func (c rlCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.r
	r.mu.RLock()
	all := make([]*rlSeries, 0, len(r.byLabels))
	for _, s := range r.byLabels {
		all = append(all, s)
	}
	r.mu.RUnlock()
	for _, s := range all {
		d, labels := 0, s.labels[:2]
		if s.deep {
			d, labels = 1, s.labels[:]
		}
		for i := range rlCounterNames {
			ch <- prometheus.MustNewConstMetric(r.descs[i][d], prometheus.CounterValue, float64(s.c[i].Load()), labels...)
		}
	}
}

// limit counts one descriptor's statistics.
func (r *rlMetrics) limit(domain, key string, st envoyrl.LimitStats) {
	r.series(domain, key).add(st)
}

// series returns key's series, creating it within the bound.
func (r *rlMetrics) series(domain, key string) *rlSeries {
	if !r.known(domain) {
		return r.overflow(otherLabel)
	}
	if s, ok := r.byKey.Load(key); ok {
		return s.(*rlSeries)
	}
	if r.nKeys.Load() >= int64(r.maxSeries) {
		return r.overflow(domain)
	}
	labels, deep := rlLabels(key)
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.byKey.Load(key); ok {
		return s.(*rlSeries)
	}
	if r.nKeys.Load() >= int64(r.maxSeries) {
		return r.overflowLocked(domain)
	}
	s := r.byLabels[labels]
	if s == nil {
		s = &rlSeries{labels: labels, deep: deep}
		r.byLabels[labels] = s
	}
	r.byKey.Store(key, s)
	r.nKeys.Add(1)
	return s
}

// overflow is the series of domain's keys past the bound (domain is one
// the rules name, or otherLabel).
func (r *rlMetrics) overflow(domain string) *rlSeries {
	r.mu.RLock()
	s := r.over[domain]
	r.mu.RUnlock()
	if s != nil {
		return s
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.overflowLocked(domain)
}

func (r *rlMetrics) overflowLocked(domain string) *rlSeries {
	if s := r.over[domain]; s != nil {
		return s
	}
	k := [3]string{otherLabel, otherLabel}
	if domain != otherLabel {
		k[0] = rlLabelValue(domain)
	}
	s := r.byLabels[k]
	if s == nil {
		s = &rlSeries{labels: k}
		r.byLabels[k] = s
	}
	r.over[domain] = s
	return s
}

// preset makes the series of every limit that counts under its rule's
// key (neither unlimited nor detailed_metric) exist, at 0 until hit.
func (r *rlMetrics) preset(rules *envoyrl.Rules) {
	for _, l := range rules.Limits() {
		if !l.Unlimited && !l.DetailedMetric {
			r.series(l.Domain, l.Rule)
		}
	}
}

// observe records a gRPC call of the Envoy API.
func (r *rlMetrics) observe(start time.Time) {
	r.requests.WithLabelValues("ShouldRateLimit").Inc()
	r.responseTime.WithLabelValues("ShouldRateLimit").Observe(time.Since(start).Seconds())
}

// ipv4 matches what envoyproxy/ratelimit takes for an IPv4 address in a
// statistics key.
var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// statReplacer makes ':' and '|' '_', as envoyproxy/ratelimit does in a
// statistics key.
var statReplacer = strings.NewReplacer(":", "_", "|", "_")

// rlLabelValue is a component as the statistics key holds it.
func rlLabelValue(s string) string {
	return ipv4.ReplaceAllStringFunc(statReplacer.Replace(s), func(ip string) string {
		return strings.ReplaceAll(ip, ".", "_")
	})
}

// rlLabels are the labels the statsd-exporter mapping of
// envoyproxy/ratelimit gives a statistics key: the domain and the first
// level, and the second level when there is one.
func rlLabels(key string) (labels [3]string, deep bool) {
	parts := strings.SplitN(rlLabelValue(key), ".", 4)
	copy(labels[:], parts)
	return labels, len(parts) >= 3
}
