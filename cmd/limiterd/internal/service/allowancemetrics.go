package service

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/costwise/batcher/envoyrl/redisstore"
	"github.com/costwise/batcher/limit/redislimit"
)

// allowanceCounts are a Redis store's allowance counts under limiterd's
// names: both stores' statistics mapped onto one set of series.
type allowanceCounts struct {
	// local and redis are decisions: answered from units held here, or by
	// a call to Redis (the one-trip path; on the Envoy store also a take,
	// whose answer decides the request that made it).
	local, redis uint64
	// takes are the allowance script's calls that take or renew units.
	takes uint64
	// lent, returned and expired are units (the keyed limits' tokens or
	// requests, the Envoy API's hits): granted, given back unspent, and
	// lost: held unspent when their lease (keyed) or window (Envoy)
	// ended, which the shared state counts as spent.
	lent, returned, expired float64
}

// keyedAllowanceCounts reads the keyed limits' store, whose units are
// 1/scale of a token or request.
func keyedAllowanceCounts(s *redislimit.Store, scale int64) func() allowanceCounts {
	return func() allowanceCounts {
		st := s.AllowanceStats()
		unit := func(n int64) float64 { return float64(n) / float64(scale) }
		return allowanceCounts{
			local: uint64(st.Local), redis: uint64(st.Remote), takes: uint64(st.Renewals),
			lent: unit(st.Lent), returned: unit(st.Returned), expired: unit(st.Expired),
		}
	}
}

// envoyAllowanceCounts reads the Envoy API's store.
func envoyAllowanceCounts(s *redisstore.Store) func() allowanceCounts {
	return func() allowanceCounts {
		st := s.AllowanceStats()
		return allowanceCounts{
			local: st.Local, redis: st.Remote + st.Takes, takes: st.Takes,
			lent: float64(st.Lent), returned: float64(st.Returned), expired: float64(st.Forfeited),
		}
	}
}

// allowanceCollector exports one store's allowance counts, read from the
// store at each scrape: the store already counts them, so decisions pay
// nothing more and no goroutine copies them.
type allowanceCollector struct {
	read                    func() allowanceCounts
	decisions, units, takes *prometheus.Desc
}

// newAllowanceCollector collects read's counts with the label store.
func newAllowanceCollector(store string, read func() allowanceCounts) allowanceCollector {
	labels := prometheus.Labels{"store": store}
	return allowanceCollector{
		read: read,
		decisions: prometheus.NewDesc("limiterd_allowance_decisions_total",
			"Decisions of a Redis store with backends.redis.local_allowance, by store (keyed, envoy) and path (local: from units held here; redis: by a call to Redis).",
			[]string{"path"}, labels),
		units: prometheus.NewDesc("limiterd_allowance_units_total",
			"Units of local allowances (keyed: tokens or requests; envoy: hits), by store and kind (lent: granted; returned: given back unspent; expired: held unspent when their lease or window ended, counted spent in Redis).",
			[]string{"kind"}, labels),
		takes: prometheus.NewDesc("limiterd_allowance_takes_total",
			"Calls to Redis that take or renew a local allowance, by store (keyed, envoy).",
			nil, labels),
	}
}

func (c allowanceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.decisions
	ch <- c.units
	ch <- c.takes
}

func (c allowanceCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.read()
	counter := func(d *prometheus.Desc, v float64, label ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, label...)
	}
	counter(c.decisions, float64(n.local), "local")
	counter(c.decisions, float64(n.redis), "redis")
	counter(c.units, n.lent, "lent")
	counter(c.units, n.returned, "returned")
	counter(c.units, n.expired, "expired")
	counter(c.takes, float64(n.takes))
}

// allowances publishes the allowance counts of a Redis store (keyed: POST
// /limit and ratelimiter.v1; envoy) as limiterd_allowance_*{store=name}.
func (m *metrics) allowances(name string, read func() allowanceCounts) {
	m.reg.MustRegister(newAllowanceCollector(name, read))
}
