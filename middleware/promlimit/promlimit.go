// Package promlimit records the metrics of the HTTP middleware (package
// httplimit) and the gRPC interceptors (package grpclimit) on a Prometheus
// registry. It is the only part of the middlewares that imports the
// Prometheus client: programs that do not use it do not compile it.
//
//	reg := prometheus.NewRegistry()
//	rl, err := httplimit.New(httplimit.Options{Store: store, Policies: policies,
//		MetricsProvider: promlimit.New(reg)})
//
// Each middleware registers three collectors, named by its
// Options.Metrics (by default batcher_http_limit_ or batcher_grpc_limit_):
// decisions_total{policy,result}, one per applied policy per request;
// decision_duration_seconds, a histogram of the time taken to decide a
// request, store round trip included; and store_errors_total. Middlewares
// sharing a registry share the collectors, told apart by the policy label.
// Nothing is registered globally.
package promlimit

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/costwise/batcher/middleware/internal/engine"
	"github.com/costwise/batcher/middleware/limitcore"
)

func init() {
	// The middlewares' deprecated Registerer option works through this
	// package once it is linked in.
	engine.SetRegistererAdapter(func(reg any) (limitcore.MetricsProvider, error) {
		r, ok := reg.(prometheus.Registerer)
		if !ok {
			return nil, fmt.Errorf("promlimit: %T is not a prometheus.Registerer", reg)
		}
		return New(r), nil
	})
}

// Provider registers the metrics of each middleware given it on one
// registry. It is safe for concurrent use.
type Provider struct {
	reg prometheus.Registerer
}

// New returns the provider registering on reg.
func New(reg prometheus.Registerer) *Provider { return &Provider{reg: reg} }

// NewRecorder registers the decision counters, the latency histogram and
// the store-error counter named by names, or reuses those already
// registered under the same names, labels and help, and binds the counters
// of policies. It implements limitcore.MetricsProvider.
func (p *Provider) NewRecorder(names limitcore.MetricsOptions, policies []string) (limitcore.Recorder, error) {
	if p == nil || p.reg == nil {
		return nil, errors.New("promlimit: no registerer")
	}
	buckets := names.Buckets
	if buckets == nil {
		buckets = limitcore.DefaultBuckets()
	}
	labels := prometheus.Labels(names.ConstLabels)
	dec, err := register(p.reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: names.Namespace, Subsystem: names.Subsystem, Name: "decisions_total", ConstLabels: labels,
		Help: "Rate-limit decisions by policy and result (allowed, denied, shadow_denied, failed_open, failed_closed).",
	}, []string{"policy", "result"}))
	if err != nil {
		return nil, err
	}
	lat, err := register(p.reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: names.Namespace, Subsystem: names.Subsystem, Name: "decision_duration_seconds", ConstLabels: labels,
		Help: "Time taken to decide a request's policies, store round trip included.", Buckets: buckets,
	}))
	if err != nil {
		return nil, err
	}
	errs, err := register(p.reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: names.Namespace, Subsystem: names.Subsystem, Name: "store_errors_total", ConstLabels: labels,
		Help: "Decisions the limit store failed to make (errors and timeouts).",
	}))
	if err != nil {
		return nil, err
	}
	r := &recorder{latency: lat, storeErrs: errs, decisions: make([][limitcore.NumResults]prometheus.Counter, len(policies))}
	for i, name := range policies {
		for res := range limitcore.NumResults {
			r.decisions[i][res] = dec.WithLabelValues(name, res.String())
		}
	}
	return r, nil
}

// register registers c on reg, or returns the collector of the same
// description already there, so that two middlewares can share a registry.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	if err != nil {
		return c, fmt.Errorf("promlimit: %w", err)
	}
	return c, nil
}

// recorder holds one middleware's collectors, the counters bound per
// policy and result so that counting looks nothing up.
type recorder struct {
	decisions [][limitcore.NumResults]prometheus.Counter // by policy index
	latency   prometheus.Observer
	storeErrs prometheus.Counter
}

func (r *recorder) Decision(policy int, res limitcore.Result) { r.decisions[policy][res].Inc() }

func (r *recorder) Duration(d time.Duration) { r.latency.Observe(d.Seconds()) }

func (r *recorder) StoreError() { r.storeErrs.Inc() }
