package engine

import (
	"fmt"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/costwise/batcher/limit"
)

// Options are the settings the HTTP middleware and the gRPC interceptors
// share; Build turns them into an Engine.
type Options struct {
	Names    []string
	Limits   []limit.Policy // named
	Store    limit.Store
	Mode     FailMode
	Fallback limit.Store // FailFallback's local store; nil: a new memory store
	Replicas int         // FailFallback divides each limit by it
	// Timeout: 0 means DefaultTimeout, negative none.
	Timeout        time.Duration
	DefaultTimeout time.Duration
	FailRetry      time.Duration
	Shadow         bool
	OnFailure      func(error)
	Registerer     prom.Registerer
	Metrics        MetricsOptions
	Now            func() time.Time
}

// FieldError names the option Build refuses.
type FieldError struct {
	Field, Reason string
}

// Error returns "FIELD: REASON".
func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Build checks o and returns its engine. The store is wrapped in package
// limit's failure policy (limit.WithFailurePolicy), which applies the
// timeout and, after a failure, decides by the mode without asking the
// store again for a second, so a dead store does not cost every request a
// timeout; a store in memory, which cannot fail, or one already wrapped, is
// used as it is.
func Build(o Options) (*Engine, error) {
	if o.Store == nil {
		return nil, &FieldError{"Store", "a store is required"}
	}
	if o.Mode < FailOpen || o.Mode > FailFallback {
		return nil, &FieldError{"OnStoreError", fmt.Sprintf("unknown mode %d", o.Mode)}
	}
	if o.Replicas < 0 {
		return nil, &FieldError{"FallbackReplicas", "must not be negative"}
	}
	if len(o.Names) > MaxPolicies {
		return nil, &FieldError{"Policies", fmt.Sprintf("%d policies, at most %d", len(o.Names), MaxPolicies)}
	}
	if o.FailRetry <= 0 {
		o.FailRetry = time.Second
	}
	timeout := o.Timeout
	switch {
	case timeout == 0:
		timeout = o.DefaultTimeout
	case timeout < 0:
		timeout = 0
	}
	var metrics *Metrics
	if o.Registerer != nil {
		m, err := NewMetrics(o.Registerer, o.Metrics, o.Names)
		if err != nil {
			return nil, &FieldError{"Registerer", err.Error()}
		}
		metrics = m
	}
	store, ours := o.Store, false
	if _, local := store.(*limit.Memory); !local {
		if _, wrapped := store.(*limit.FailureStore); !wrapped {
			onFailure := func(err error) { // each real failure, not each degraded decision
				metrics.storeError()
				if o.OnFailure != nil {
					o.OnFailure(err)
				}
			}
			fs, err := limit.WithFailurePolicy(store, limit.FailureOptions{
				Mode: failureMode(o.Mode), Fallback: o.Fallback, Replicas: o.Replicas,
				Timeout: timeout, Probe: o.FailRetry, OnFailure: onFailure,
			})
			if err != nil {
				return nil, &FieldError{"Store", err.Error()}
			}
			store, ours = fs, true
		}
	}
	c := Config{Policies: o.Names, Backend: NewLimitBackend(store, o.Limits), Mode: o.Mode,
		FailRetry: o.FailRetry, Shadow: o.Shadow, Now: o.Now, Metrics: metrics, failuresCounted: ours}
	return New(c)
}

func failureMode(m FailMode) limit.FailureMode {
	switch m {
	case FailClosed:
		return limit.FailClosed
	case FailFallback:
		return limit.FailFallback
	}
	return limit.FailOpen
}
