package engine

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/middleware/limitcore"
)

// Options are the settings the HTTP middleware and the gRPC interceptors
// share; Build turns them into an Engine.
type Options struct {
	Package  string // for errors: "httplimit", "grpclimit"
	Names    []string
	Limits   []limit.Policy // named (see Named)
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
	// MetricsProvider, or else Registerer through the adapter that package
	// promlimit installs, makes the recorder, given MetricsNames.
	MetricsProvider limitcore.MetricsProvider
	Registerer      any
	MetricsNames    limitcore.MetricsOptions
	Now             func() time.Time
}

// Named returns a policy's name, or the limit's own name when it has none,
// and the limit under that name: the store, the headers and the metrics
// call the policy the same.
func Named(name string, l limit.Policy) (string, limit.Policy) {
	if name == "" {
		name = l.Name
	}
	l.Name = name
	return name, l
}

// Build checks o and returns its engine, or a *limitcore.ConfigError. The
// store is wrapped in package limit's failure policy
// (limit.WithFailurePolicy), which applies the timeout and, after a failure,
// decides by the mode without asking the store again for a second, so a
// dead store does not cost every request a timeout; a store in memory,
// which cannot fail, or one already wrapped, is used as it is.
func Build(o Options) (*Engine, error) {
	fail := func(field, format string, args ...any) error {
		return &limitcore.ConfigError{Field: field, Reason: fmt.Sprintf(format, args...), Package: o.Package}
	}
	if err := checkPolicies(o.Names, o.Limits, fail); err != nil {
		return nil, err
	}
	if o.Store == nil {
		return nil, fail("Store", "a store is required")
	}
	if o.Mode < FailOpen || o.Mode > FailFallback {
		return nil, fail("OnStoreError", "unknown mode %d", o.Mode)
	}
	if o.Replicas < 0 {
		return nil, fail("FallbackReplicas", "must not be negative")
	}
	if o.FailRetry <= 0 {
		o.FailRetry = time.Second
	}
	rec, err := o.recorder()
	if err != nil {
		return nil, err
	}
	store, ours, err := o.failureStore(rec)
	if err != nil {
		return nil, fail("Store", "%v", err)
	}
	c := Config{Policies: o.Names, Backend: NewLimitBackend(store, o.Limits), Mode: o.Mode,
		FailRetry: o.FailRetry, Shadow: o.Shadow, Now: o.Now, Recorder: rec, failuresCounted: ours}
	return New(c)
}

// checkPolicies checks the number of policies, their names (printable
// ASCII, each once) and their limits.
func checkPolicies(names []string, limits []limit.Policy, fail func(field, format string, args ...any) error) error {
	if len(names) == 0 || len(names) > MaxPolicies {
		return fail("Policies", "%d policies, want 1 to %d", len(names), MaxPolicies)
	}
	seen := make(map[string]bool, len(names))
	for i, name := range names {
		field := fmt.Sprintf("Policies[%d]", i)
		if !limitcore.ValidPolicyName(name) {
			return fail(field+".Name", "%q is not a non-empty printable ASCII name", name)
		}
		if seen[name] {
			return fail(field+".Name", "%q is used twice", name)
		}
		seen[name] = true
		if err := limits[i].Validate(); err != nil {
			return fail(field+".Limit", "%v", err)
		}
	}
	return nil
}

// recorder returns the recorder of the metrics provider, or of the
// deprecated registerer.
func (o *Options) recorder() (limitcore.Recorder, error) {
	p := o.MetricsProvider
	if o.Registerer != nil {
		if p != nil {
			return nil, &limitcore.ConfigError{Field: "Registerer", Package: o.Package,
				Reason: "set MetricsProvider or Registerer, not both"}
		}
		adapt := registererAdapter.Load()
		if adapt == nil {
			return nil, &limitcore.ConfigError{Field: "Registerer", Package: o.Package,
				Reason: "a Prometheus registerer needs package promlimit: set MetricsProvider to promlimit.New(reg)"}
		}
		var err error
		if p, err = (*adapt)(o.Registerer); err != nil {
			return nil, &limitcore.ConfigError{Field: "Registerer", Reason: err.Error(), Package: o.Package}
		}
	}
	if p == nil {
		return nil, nil
	}
	rec, err := p.NewRecorder(o.MetricsNames, o.Names)
	if err != nil {
		return nil, &limitcore.ConfigError{Field: "MetricsProvider", Reason: err.Error(), Package: o.Package}
	}
	return rec, nil
}

// failureStore returns the store wrapped in package limit's failure
// policy, and whether the wrapper is ours (and so counts the failures on
// rec).
func (o *Options) failureStore(rec limitcore.Recorder) (limit.Store, bool, error) {
	store := o.Store
	if _, local := store.(*limit.Memory); local {
		return store, false, nil
	}
	if _, wrapped := store.(*limit.FailureStore); wrapped {
		return store, false, nil
	}
	timeout := o.Timeout
	switch {
	case timeout == 0:
		timeout = o.DefaultTimeout
	case timeout < 0:
		timeout = 0
	}
	onFailure := func(err error) { // each real failure, not each degraded decision
		if rec != nil {
			rec.StoreError()
		}
		if o.OnFailure != nil {
			o.OnFailure(err)
		}
	}
	fs, err := limit.WithFailurePolicy(store, limit.FailureOptions{
		Mode: failureMode(o.Mode), Fallback: o.Fallback, Replicas: o.Replicas,
		Timeout: timeout, Probe: o.FailRetry, OnFailure: onFailure,
	})
	return fs, err == nil, err
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

// registererAdapter turns the value of a middleware's deprecated
// Registerer option (a prometheus.Registerer) into a MetricsProvider; nil
// until package promlimit, which owns the Prometheus dependency, is linked
// into the program and installs it.
var registererAdapter atomic.Pointer[func(reg any) (limitcore.MetricsProvider, error)]

// SetRegistererAdapter installs adapt as the way from a Registerer option
// to a MetricsProvider. Package promlimit calls it from its init function.
func SetRegistererAdapter(adapt func(reg any) (limitcore.MetricsProvider, error)) {
	registererAdapter.Store(&adapt)
}
