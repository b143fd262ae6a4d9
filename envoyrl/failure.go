package envoyrl

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/costwise/batcher/internal/failover"
	"github.com/costwise/batcher/limit"
)

// FailureMode says how a FailureStore decides while its store fails: the
// modes of package limit, under the same names.
type FailureMode = limit.FailureMode

// The failure modes.
const (
	// FailOpen counts nothing while the store fails: every descriptor is
	// OK, with its whole limit remaining. It is the default.
	FailOpen = limit.FailOpen
	// FailClosed fails every call with the store's failure (a *StoreError
	// from the Service: Unavailable on gRPC, 503 on /json), so that Envoy's
	// failure_mode_deny decides.
	FailClosed = limit.FailClosed
	// FailFallback counts on a local store, the local fallback, at the
	// limits divided by the expected number of replicas.
	FailFallback = limit.FailFallback
)

// FailureOptions configure WithFailurePolicy. The zero value fails open,
// with no timeout of its own and a probe every second.
type FailureOptions struct {
	// Mode chooses fail-open (default), fail-closed or the local fallback.
	Mode FailureMode
	// Fallback is the local store of FailFallback; required with it.
	Fallback Store
	// Replicas is the expected number of replicas sharing the store: while
	// it fails, each replica counts every hit this many times on its
	// fallback, so that it admits its share, the limit divided by
	// Replicas, and reports remaining counts on the scale of the whole
	// limit. Default 1.
	Replicas int
	// Timeout bounds each call to the store; 0 leaves only the caller's
	// context. The store must return when its context ends (the stores of
	// this module do).
	Timeout time.Duration
	// Probe is how long after a failure the store is not asked again. After
	// it one call at a time probes the store, the others decided by the
	// mode at once, until a probe succeeds. Default 1 s.
	Probe time.Duration
	// OnFailure, when set, is called with every failure of the store, for
	// logs and metrics. It must not block.
	OnFailure func(error)
	// Now is the clock of the probe window, measured between its readings
	// with time.Time.Sub; time.Now by default, whose readings carry
	// monotonic time, so that a step of the wall clock does not move the
	// window.
	Now func() time.Time
}

// FailureStore is a Store that decides by its FailureMode while the store
// it wraps fails: the failure policy of the Envoy API, the same circuit as
// limit.FailureStore's. A failure is any error of the store but the
// caller's context ending. FailureStore is safe for concurrent use.
//
// A call the timeout gave up on may still be counted by the store if it
// was already written when it gave up (see redisstore); with FailFallback
// such a call is then counted twice, on the store and on the fallback.
type FailureStore struct {
	store, fallback Store
	mode            FailureMode
	replicas        uint64
	guard           *failover.Guard
}

// WithFailurePolicy wraps store in the failure policy of o.
func WithFailurePolicy(store Store, o FailureOptions) (*FailureStore, error) {
	switch {
	case store == nil:
		return nil, &ConfigError{"failure policy", "the store must not be nil"}
	case o.Mode > FailFallback:
		return nil, &ConfigError{"failure policy", fmt.Sprintf("unknown failure mode %d", o.Mode)}
	case o.Mode == FailFallback && o.Fallback == nil:
		return nil, &ConfigError{"failure policy", "the local fallback needs a fallback store"}
	case o.Replicas < 0 || o.Probe < 0 || o.Timeout < 0:
		return nil, &ConfigError{"failure policy", "replicas, timeout and probe must not be negative"}
	}
	if o.Probe == 0 {
		o.Probe = time.Second
	}
	f := &FailureStore{store: store, fallback: o.Fallback, mode: o.Mode, replicas: uint64(max(o.Replicas, 1))}
	if o.Mode != FailFallback {
		f.fallback = nil
	}
	f.guard = failover.New(failover.Options{Timeout: o.Timeout, Probe: o.Probe, Now: o.Now, OnFailure: o.OnFailure,
		Failure: func(err error, timedOut bool) error {
			if timedOut {
				return &StoreError{fmt.Errorf("no answer within %v: %w", o.Timeout, err)}
			}
			return err
		}})
	return f, nil
}

// Down reports whether the store failed less than Probe ago, so that a
// call now would be decided by the failure mode without asking it.
func (f *FailureStore) Down() bool { return f.guard.Down() }

// Add implements Store.
func (f *FailureStore) Add(ctx context.Context, counters []Counter) error {
	failure, err := f.guard.Do(ctx, func(ctx context.Context) error { return f.store.Add(ctx, counters) })
	if failure == nil {
		return err
	}
	switch f.mode {
	case FailClosed:
		return failure
	case FailFallback:
		for i := range counters {
			counters[i].Hits *= f.replicas
		}
		err := f.fallback.Add(ctx, counters)
		for i := range counters {
			counters[i].Hits /= f.replicas
		}
		return err
	}
	for i := range counters {
		counters[i].Count = 0
	}
	return nil
}

// Get implements Store.
func (f *FailureStore) Get(ctx context.Context, counters []Counter) error {
	failure, err := f.guard.Do(ctx, func(ctx context.Context) error { return f.store.Get(ctx, counters) })
	if failure == nil {
		return err
	}
	switch f.mode {
	case FailClosed:
		return failure
	case FailFallback:
		return f.fallback.Get(ctx, counters)
	}
	for i := range counters {
		counters[i].Count = 0
	}
	return nil
}

var _ Store = (*FailureStore)(nil)

// FallbackStore is the former name of FailureStore.
//
// Deprecated: use FailureStore.
type FallbackStore = FailureStore

// FallbackOptions configure WithFallback.
//
// Deprecated: use FailureOptions.
type FallbackOptions struct {
	// Replicas is FailureOptions.Replicas.
	Replicas int
	// Probe is FailureOptions.Probe.
	Probe time.Duration
	// OnFailure is FailureOptions.OnFailure.
	OnFailure func(error)
	// Now is FailureOptions.Now.
	Now func() time.Time
}

// WithFallback returns a store that counts on primary, and while primary
// fails on local at the limits divided by o.Replicas (FailFallback); with
// local nil, the calls fail at once with the primary's last failure while
// it is down (FailClosed).
//
// Deprecated: use WithFailurePolicy.
func WithFallback(primary, local Store, o FallbackOptions) (*FallbackStore, error) {
	mode := FailFallback
	if local == nil {
		mode = FailClosed
	}
	return WithFailurePolicy(primary, FailureOptions{Mode: mode, Fallback: local, Replicas: o.Replicas,
		Probe: o.Probe, OnFailure: o.OnFailure, Now: o.Now})
}

// ErrStoreDown was the failure of a FallbackStore without a local store
// whose primary's own failure was not known. A FailureStore always returns
// the store's own failure.
var ErrStoreDown = errors.New("envoyrl: store down")
