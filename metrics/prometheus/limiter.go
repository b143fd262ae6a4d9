package prometheus

import (
	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/costwise/batcher"
)

// SharedSource is implemented by the rate limiters that split a shared
// capacity into leased partitions: *batcher.SharedResource (whatever its
// LeaseManager, Redis included) and *batcher.AzureSharedResource.
type SharedSource interface {
	Stats() batcher.SharedStats
}

// The shared resources of package batcher report their leases.
var (
	_ SharedSource = (*batcher.SharedResource)(nil)
	_ SharedSource = (*batcher.AzureSharedResource)(nil)
)

// LimiterCollector is a prometheus.Collector for a batcher.RateLimiter. It
// reports capacity and maximum capacity for any limiter and, when the
// limiter is a SharedSource, its partitions, demand and lease counters too.
// Everything is read at scrape time. Its metrics are in the "limiter"
// subsystem, so they do not collide with a BatcherCollector's on one
// registry.
//
// A LimiterCollector is safe for concurrent use.
type LimiterCollector struct {
	rl     batcher.RateLimiter
	shared SharedSource // nil unless rl is one

	capacity, maxCapacity                    *prom.Desc
	owner                                    *prom.Desc
	partitions, held, demand, share          *prom.Desc
	acquisitions, conflicts, renewals, freed *prom.Desc
	calls, failures, errs                    *prom.Desc
}

// NewLimiterCollector returns a collector for rl with the given options.
func NewLimiterCollector(rl batcher.RateLimiter, opts Options) *LimiterCollector {
	d := func(name, help string, labels ...string) *prom.Desc {
		return opts.desc("limiter", name, help, labels...)
	}
	c := &LimiterCollector{
		rl:          rl,
		capacity:    d("capacity", "Capacity the limiter holds now, in cost per second."),
		maxCapacity: d("max_capacity", "Most capacity the limiter could supply, in cost per second."),
	}
	shared, ok := rl.(SharedSource)
	if !ok {
		return c
	}
	c.shared = shared
	c.owner = d("owner_info", "Always 1; the owner label is the id this instance leases under.", "owner")
	c.partitions = d("partitions", "Partitions the shared capacity is split into.")
	c.held = d("partitions_held", "Partitions whose lease this instance holds now.")
	c.demand = d("partitions_demand", "Partitions this instance wants for its target.")
	c.share = d("partitions_share", "This instance's max-min fair share of the partitions, as of its last snapshot.")
	c.acquisitions = d("lease_acquisitions_total", "Partition leases won.")
	c.conflicts = d("lease_conflicts_total", "Races for a partition lease lost to another instance.")
	c.renewals = d("lease_renewals_total", "Partition leases renewed.")
	c.freed = d("lease_releases_total", "Partition leases given up: released, lost or expired.")
	c.calls = d("storage_calls_total", "Calls to the lease store.")
	c.failures = d("storage_errors_total", "Calls to the lease store that returned an error, lease conflicts included.")
	c.errs = d("errors_total", "Error events raised by the limiter.")
	return c
}

// RegisterLimiter makes a LimiterCollector for rl and registers it on reg.
func RegisterLimiter(reg prom.Registerer, rl batcher.RateLimiter, opts Options) (*LimiterCollector, error) {
	c := NewLimiterCollector(rl, opts)
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	return c, nil
}

// Describe sends the descriptions of every metric c can collect.
func (c *LimiterCollector) Describe(ch chan<- *prom.Desc) {
	ch <- c.capacity
	ch <- c.maxCapacity
	if c.shared == nil {
		return
	}
	for _, d := range []*prom.Desc{
		c.owner, c.partitions, c.held, c.demand, c.share,
		c.acquisitions, c.conflicts, c.renewals, c.freed, c.calls, c.failures, c.errs,
	} {
		ch <- d
	}
}

// Collect reads the limiter's state and sends it as metrics.
func (c *LimiterCollector) Collect(ch chan<- prom.Metric) {
	gauge := func(d *prom.Desc, v float64, labels ...string) {
		ch <- constMetric(d, prom.GaugeValue, v, labels...)
	}
	counter := func(d *prom.Desc, v uint64) {
		ch <- constMetric(d, prom.CounterValue, float64(v))
	}
	if c.shared == nil {
		gauge(c.capacity, float64(c.rl.Capacity()))
		gauge(c.maxCapacity, float64(c.rl.MaxCapacity()))
		return
	}
	s := c.shared.Stats()
	gauge(c.capacity, float64(s.Capacity))
	gauge(c.maxCapacity, float64(c.rl.MaxCapacity()))
	gauge(c.owner, 1, s.Owner)
	gauge(c.partitions, float64(s.Partitions))
	gauge(c.held, float64(s.Held))
	gauge(c.demand, float64(s.Demand))
	gauge(c.share, float64(s.Share))
	counter(c.acquisitions, s.Acquisitions)
	counter(c.conflicts, s.Conflicts)
	counter(c.renewals, s.Renewals)
	counter(c.freed, s.Releases)
	counter(c.calls, s.StorageCalls)
	counter(c.failures, s.StorageFailures)
	counter(c.errs, s.Errors)
}
