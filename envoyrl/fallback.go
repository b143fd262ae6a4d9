package envoyrl

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// FallbackOptions configure WithFallback.
type FallbackOptions struct {
	// Replicas is the expected number of replicas sharing the primary
	// store: while it fails, each replica counts every hit this many times
	// on its local store, so that it admits its share, the limit divided
	// by Replicas, and reports remaining counts on the scale of the whole
	// limit. Default 1.
	Replicas int
	// Probe is how long after a failure the primary is not asked again:
	// the local store counts until then. Default 1 s.
	Probe time.Duration
	// OnFailure, when set, is called with every failure of the primary, for
	// logs and metrics. It must not block.
	OnFailure func(error)
	// Now is the clock of the probe; time.Now by default.
	Now func() time.Time
}

// FallbackStore is a Store that counts on a local store while its primary
// store fails: the local fallback of the failure policies, for the Envoy
// API. A failure is any error of the primary but the caller's context
// ending. Without a local store, calls made while the primary is down fail
// at once with its last failure, instead of waiting for a store that just
// failed; the caller's failure policy (fail open or closed) answers them.
// FallbackStore is safe for concurrent use.
type FallbackStore struct {
	primary, local Store
	o              FallbackOptions
	downUntil      atomic.Int64 // Unix nanoseconds before which the primary is not asked
	lastErr        atomic.Pointer[error]
}

// WithFallback returns a store that counts on primary, and while primary
// fails on local, at the limits divided by o.Replicas. local may be nil.
func WithFallback(primary, local Store, o FallbackOptions) (*FallbackStore, error) {
	if primary == nil {
		return nil, &ConfigError{"fallback", "the primary store must not be nil"}
	}
	if o.Replicas < 0 || o.Probe < 0 {
		return nil, &ConfigError{"fallback", "replicas and probe must not be negative"}
	}
	o.Replicas = max(o.Replicas, 1)
	if o.Probe == 0 {
		o.Probe = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &FallbackStore{primary: primary, local: local, o: o}, nil
}

// Down reports whether the primary failed less than Probe ago.
func (f *FallbackStore) Down() bool { return f.o.Now().UnixNano() < f.downUntil.Load() }

// Add implements Store.
func (f *FallbackStore) Add(ctx context.Context, counters []Counter) error {
	if !f.Down() {
		err := f.primary.Add(ctx, counters)
		if !f.failed(ctx, err) {
			return err
		}
	}
	if f.local == nil {
		return f.last()
	}
	r := uint64(f.o.Replicas)
	for i := range counters {
		counters[i].Hits *= r
	}
	err := f.local.Add(ctx, counters)
	for i := range counters {
		counters[i].Hits /= r
	}
	return err
}

// Get implements Store.
func (f *FallbackStore) Get(ctx context.Context, counters []Counter) error {
	if !f.Down() {
		err := f.primary.Get(ctx, counters)
		if !f.failed(ctx, err) {
			return err
		}
	}
	if f.local == nil {
		return f.last()
	}
	return f.local.Get(ctx, counters)
}

// last returns the primary's last failure.
func (f *FallbackStore) last() error {
	if p := f.lastErr.Load(); p != nil {
		return *p
	}
	return ErrStoreDown
}

// ErrStoreDown is the failure of a FallbackStore without a local store
// whose primary is down, when the primary's own failure is not known.
var ErrStoreDown = errors.New("envoyrl: store down")

// failed reports whether err is a failure of the primary, and if so marks
// it down for Probe and reports the failure.
func (f *FallbackStore) failed(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return false
	}
	failure := err // a copy, so that err does not escape on the path without failure
	f.lastErr.Store(&failure)
	f.downUntil.Store(f.o.Now().Add(f.o.Probe).UnixNano())
	if f.o.OnFailure != nil {
		f.o.OnFailure(err)
	}
	return true
}

var _ Store = (*FallbackStore)(nil)
