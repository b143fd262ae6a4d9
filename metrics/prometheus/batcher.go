package prometheus

import (
	"errors"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/costwise/batcher"
)

// BatcherSource is what a BatcherCollector reads at scrape time; a
// *batcher.Batcher is one.
type BatcherSource interface {
	Stats() batcher.BatcherStats
}

var (
	_ prom.Collector        = (*BatcherCollector)(nil)
	_ batcher.BatchObserver = (*BatcherCollector)(nil)
	_ prom.Collector        = (*LimiterCollector)(nil)
)

// BatcherCollector is a prometheus.Collector for one Batcher. Counters and
// gauges are read from the batcher's Stats at scrape time, so they cost the
// batcher nothing between scrapes; the batch-size and wait-time histograms
// are fed by ObserveBatch, which the batcher calls once per released batch
// when the collector is registered with WithObserver (Register does both).
//
// A BatcherCollector is safe for concurrent use.
type BatcherCollector struct {
	src  BatcherSource
	size prom.Histogram
	wait prom.Histogram

	enqueued, rejected, released, cost, batches  *prom.Desc
	buffered, target, inflight, limit            *prom.Desc
	capacity, maxCapacity                        *prom.Desc
	paused, pauses, pausedSeconds, audits        *prom.Desc
	running, lastRelease                         *prom.Desc
	costRatio                                    *prom.Desc
	classOps, classCost, watcherOps, watcherCost *prom.Desc
}

// NewBatcherCollector returns a collector for src with the given options.
// To fill the histograms, also pass the collector to the batcher's
// WithObserver before Start; Register does this for a *batcher.Batcher.
func NewBatcherCollector(src BatcherSource, opts Options) *BatcherCollector {
	d := opts.desc
	return &BatcherCollector{
		src:  src,
		size: opts.histogram("batch_operations", "Operations per released batch.", opts.SizeBuckets, DefaultSizeBuckets),
		wait: opts.histogram("batch_wait_seconds",
			"Time the oldest operation of each released batch waited between Enqueue and release.",
			opts.WaitBuckets, DefaultWaitBuckets),
		enqueued:      d("", "operations_enqueued_total", "Operations accepted by Enqueue."),
		rejected:      d("", "operations_rejected_total", "Operations refused by Enqueue, by reason.", "reason"),
		released:      d("", "operations_released_total", "Operations handed to watchers."),
		cost:          d("", "cost_released_total", "Total cost of the operations handed to watchers."),
		batches:       d("", "batches_released_total", "Batches handed to watchers."),
		buffered:      d("", "buffered_operations", "Accepted operations not yet released (buffer depth)."),
		target:        d("", "target", "Cost of accepted operations whose batches are not done: the capacity the batcher asks for."),
		inflight:      d("", "inflight_batches", "Watcher callbacks running now."),
		limit:         d("", "inflight_batches_limit", "Most watcher callbacks allowed at once (WithMaxConcurrentBatches); absent when unlimited."),
		capacity:      d("", "capacity", "Capacity the rate limiter supplies now, in cost per second; absent without a rate limiter."),
		maxCapacity:   d("", "max_capacity", "Most capacity the rate limiter could supply, in cost per second; absent without a rate limiter."),
		paused:        d("", "paused", "1 while a pause is in force, else 0."),
		pauses:        d("", "pauses_total", "Pauses started or lengthened."),
		pausedSeconds: d("", "paused_seconds_total", "Total length of the pauses applied."),
		audits:        d("", "audits_total", "Audits of the target, by result (pass, fail, skip).", "result"),
		running:       d("", "running", "1 between Start and Stop, else 0."),
		lastRelease:   d("", "last_release_timestamp_seconds", "Unix time of the last release; absent before the first."),
		costRatio:     d("", "cost_ratio", "Actual ÷ estimated cost of the operations whose callbacks reported it lately; 1 when none did."),
		classOps:      d("", "priority_operations_released_total", "Operations handed to watchers, by priority class; only under fair release.", "priority"),
		classCost:     d("", "priority_cost_released_total", "Cost of the operations handed to watchers, by priority class; only under fair release.", "priority"),
		watcherOps: d("", "watcher_operations_released_total",
			"Operations handed to named watchers, by name (at most batcher.MaxWatcherNames, the rest as \"other\"); only under fair release.", "watcher"),
		watcherCost: d("", "watcher_cost_released_total",
			"Cost of the operations handed to named watchers, by name (at most batcher.MaxWatcherNames, the rest as \"other\"); only under fair release.", "watcher"),
	}
}

// histogram returns a histogram in the collector's namespace.
func (o Options) histogram(name, help string, buckets, def []float64) prom.Histogram {
	if buckets == nil {
		buckets = def
	}
	return prom.NewHistogram(prom.HistogramOpts{
		Namespace:   o.namespace(),
		Name:        name,
		Help:        help,
		ConstLabels: o.ConstLabels,
		Buckets:     buckets,
	})
}

// ErrStarted is returned by Register for a batcher that is already running.
var ErrStarted = errors.New("prometheus: batcher already started: register its collector before Start")

// Register makes a BatcherCollector for b, sets it as b's BatchObserver
// (replacing any set before) and registers it on reg. Call it before
// b.Start: after Start the observer cannot be set and the histograms stay
// empty. It returns the error of
// reg.Register, for example when another collector on reg has the same
// metrics and constant labels.
func Register(reg prom.Registerer, b *batcher.Batcher, opts Options) (*BatcherCollector, error) {
	if b.Stats().Running {
		return nil, ErrStarted
	}
	c := NewBatcherCollector(b, opts)
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	b.WithObserver(c)
	return c, nil
}

// Observer returns c as a batcher.BatchObserver, for WithObserver.
func (c *BatcherCollector) Observer() batcher.BatchObserver { return c }

// ObserveBatch records one released batch in the histograms. The batcher
// calls it on its loop goroutine; it takes no lock and does not allocate.
func (c *BatcherCollector) ObserveBatch(ops int, cost uint64, wait time.Duration) {
	c.size.Observe(float64(ops))
	c.wait.Observe(wait.Seconds())
}

// Describe sends the descriptions of every metric c can collect.
func (c *BatcherCollector) Describe(ch chan<- *prom.Desc) {
	for _, d := range []*prom.Desc{
		c.enqueued, c.rejected, c.released, c.cost, c.batches,
		c.buffered, c.target, c.inflight, c.limit, c.capacity, c.maxCapacity,
		c.paused, c.pauses, c.pausedSeconds, c.audits, c.running, c.lastRelease,
		c.costRatio, c.classOps, c.classCost, c.watcherOps, c.watcherCost,
	} {
		ch <- d
	}
	c.size.Describe(ch)
	c.wait.Describe(ch)
}

// Collect reads one Stats snapshot and sends it as metrics, followed by the
// histograms.
func (c *BatcherCollector) Collect(ch chan<- prom.Metric) {
	s := c.src.Stats()
	counter := func(d *prom.Desc, v float64, labels ...string) {
		ch <- constMetric(d, prom.CounterValue, v, labels...)
	}
	gauge := func(d *prom.Desc, v float64) {
		ch <- constMetric(d, prom.GaugeValue, v)
	}
	for class, r := range s.Classes {
		counter(c.classOps, float64(r.Operations), class)
		counter(c.classCost, float64(r.Cost), class)
	}
	for name, r := range s.Watchers {
		counter(c.watcherOps, float64(r.Operations), name)
		counter(c.watcherCost, float64(r.Cost), name)
	}
	counter(c.enqueued, float64(s.Enqueued))
	for _, r := range batcher.AllRejectReasons() {
		counter(c.rejected, float64(s.Rejected[r.String()]), r.String())
	}
	counter(c.released, float64(s.Released))
	counter(c.cost, float64(s.CostReleased))
	counter(c.batches, float64(s.Batches))
	counter(c.pauses, float64(s.Pauses))
	counter(c.pausedSeconds, s.PausedSeconds)
	counter(c.audits, float64(s.AuditPass), "pass")
	counter(c.audits, float64(s.AuditFail), "fail")
	counter(c.audits, float64(s.AuditSkip), "skip")
	gauge(c.buffered, float64(s.Buffered))
	gauge(c.target, float64(s.Target))
	gauge(c.inflight, float64(s.Inflight))
	gauge(c.paused, boolValue(s.Paused))
	gauge(c.running, boolValue(s.Running))
	gauge(c.costRatio, s.CostRatio)
	if s.ConfiguredLimit > 0 {
		gauge(c.limit, float64(s.ConfiguredLimit))
	}
	if s.RateLimited {
		gauge(c.capacity, float64(s.Capacity))
		gauge(c.maxCapacity, float64(s.MaxCapacity))
	}
	if !s.LastRelease.IsZero() {
		gauge(c.lastRelease, float64(s.LastRelease.UnixNano())/1e9)
	}
	c.size.Collect(ch)
	c.wait.Collect(ch)
}

// boolValue is 1 for true and 0 for false.
func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
