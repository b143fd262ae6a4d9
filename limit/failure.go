package limit

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// FailureMode says how a FailureStore decides while its store fails.
type FailureMode uint8

const (
	// FailOpen admits every request while the store fails (availability
	// first). It is the default.
	FailOpen FailureMode = iota
	// FailClosed denies every request while the store fails (protection
	// first); the decisions carry RetryAfter = FailureOptions.Probe.
	FailClosed
	// FailLocal decides on a local store (Fallback) at the limit divided by
	// the expected number of replicas until the store answers again.
	FailLocal
)

// FailureOptions configure WithFailurePolicy. The zero value fails open, with
// no timeout of its own and a probe every second.
type FailureOptions struct {
	// Mode chooses fail-open (default), fail-closed or the local fallback.
	Mode FailureMode
	// Fallback is the store of FailLocal. Default a new Memory with default
	// options.
	Fallback Store
	// Replicas is the expected number of replicas sharing the store: the
	// fallback decides each policy divided by it (Policy.Divide). Default 1.
	Replicas int
	// Timeout bounds each call to the store, so that a slow store cannot
	// slow decisions past it; 0 leaves only the caller's context.
	Timeout time.Duration
	// Probe is how long after a failure the store is not asked again:
	// decisions are made by the failure mode until then, without waiting
	// for a store that just failed. Default 1 s.
	Probe time.Duration
	// OnFailure, when set, is called with every failure of the store (a
	// *StoreError), for logs and metrics. It must not block.
	OnFailure func(error)
	// Clock tells the time of the probe. Default the system clock.
	Clock Clock
}

// FailureStore is a Store that decides by its FailureMode while the store it
// wraps fails. A failure is an error matching ErrStoreFailed, or the wrapper's
// own Timeout; policy and cost errors, and the caller's context errors, pass
// through unchanged. Decisions made by the failure mode come back with a nil
// error, their Reason (ReasonFailOpen, ReasonFailClosed, ReasonFallback) and
// the failure in Decision.Err; each failure is counted and given to
// OnFailure. FailureStore is safe for concurrent use.
type FailureStore struct {
	store     Store
	o         FailureOptions
	downUntil atomic.Int64 // unix nanoseconds before which the store is not asked
	lastErr   atomic.Pointer[error]
	failures  atomic.Int64
	degraded  atomic.Int64
}

// WithFailurePolicy wraps store with the failure policy of o.
func WithFailurePolicy(store Store, o FailureOptions) (*FailureStore, error) {
	if store == nil {
		return nil, &OptionError{Option: "store", Reason: "must not be nil"}
	}
	if o.Mode > FailLocal {
		return nil, &OptionError{Option: "Mode", Reason: "unknown failure mode"}
	}
	if o.Replicas < 0 || o.Timeout < 0 || o.Probe < 0 {
		return nil, &OptionError{Option: "Replicas, Timeout, Probe", Reason: "must not be negative"}
	}
	o.Replicas = max(o.Replicas, 1)
	if o.Probe == 0 {
		o.Probe = time.Second
	}
	if o.Clock == nil {
		o.Clock = realClock{}
	}
	if o.Mode == FailLocal && o.Fallback == nil {
		mem, err := NewMemory(MemoryOptions{})
		if err != nil {
			return nil, err
		}
		o.Fallback = mem
	}
	return &FailureStore{store: store, o: o}, nil
}

// FailureStats counts a FailureStore's failures.
type FailureStats struct {
	// Failures is the number of calls to the store that failed.
	Failures int64
	// Degraded is the number of calls decided by the failure mode.
	Degraded int64
}

// Stats returns the counters.
func (f *FailureStore) Stats() FailureStats {
	return FailureStats{Failures: f.failures.Load(), Degraded: f.degraded.Load()}
}

// Down reports whether the store failed less than Probe ago.
func (f *FailureStore) Down() bool { return f.o.Clock.Now().UnixNano() < f.downUntil.Load() }

// call runs op on the store unless it failed less than Probe ago. It
// returns the store's failure (the last one while the store is down), or
// else op's own error.
func (f *FailureStore) call(ctx context.Context, op string, run func(context.Context) error) (failure error, err error) {
	if f.Down() {
		if p := f.lastErr.Load(); p != nil {
			return *p, nil
		}
	}
	cctx := ctx
	if f.o.Timeout > 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, f.o.Timeout)
		defer cancel()
	}
	err = run(cctx)
	if err == nil || ctx.Err() != nil {
		return nil, err
	}
	if !errors.Is(err, ErrStoreFailed) && !(f.o.Timeout > 0 && errors.Is(err, context.DeadlineExceeded)) {
		return nil, err
	}
	failure = err
	if !errors.Is(err, ErrStoreFailed) {
		failure = &StoreError{Op: op, Err: err}
	}
	f.failures.Add(1)
	stored := failure // a copy: a pointer to the named result would change with it
	f.lastErr.Store(&stored)
	f.downUntil.Store(f.o.Clock.Now().Add(f.o.Probe).UnixNano())
	if f.o.OnFailure != nil {
		f.o.OnFailure(failure)
	}
	return failure, nil
}

// AllowN decides on the store, or by the failure mode when it fails.
func (f *FailureStore) AllowN(ctx context.Context, key string, p Policy, cost int64) (Decision, error) {
	var dec Decision
	failure, err := f.call(ctx, "allow", func(ctx context.Context) (err error) {
		dec, err = f.store.AllowN(ctx, key, p, cost)
		return err
	})
	if failure == nil {
		return dec, err
	}
	f.degraded.Add(1)
	if f.o.Mode == FailLocal {
		dec, err = f.o.Fallback.AllowN(ctx, key, p.Divide(f.o.Replicas), cost)
		dec.Policy, dec.Reason, dec.Err = p.Name, ReasonFallback, failure
		return dec, err
	}
	return f.degrade(p, failure), nil
}

func (f *FailureStore) degrade(p Policy, failure error) Decision {
	dec := Decision{Allowed: true, Reason: ReasonFailOpen, Limit: p.Limit, Remaining: p.Limit,
		Policy: p.Name, Err: failure}
	if f.o.Mode == FailClosed {
		dec.Allowed, dec.Reason, dec.Remaining, dec.RetryAfter = false, ReasonFailClosed, 0, f.o.Probe
	}
	return dec
}

// AllowAll decides reqs together on the store, or by the failure mode.
func (f *FailureStore) AllowAll(ctx context.Context, reqs []Request, out []Decision) ([]Decision, error) {
	return f.multi(ctx, "allow all", reqs, out, Store.AllowAll)
}

// CountAll counts reqs on the store, or decides them by the failure mode.
func (f *FailureStore) CountAll(ctx context.Context, reqs []Request, out []Decision) ([]Decision, error) {
	return f.multi(ctx, "count all", reqs, out, Store.CountAll)
}

type multiFunc func(Store, context.Context, []Request, []Decision) ([]Decision, error)

func (f *FailureStore) multi(ctx context.Context, op string, reqs []Request, out []Decision, fn multiFunc) ([]Decision, error) {
	start := len(out)
	var res []Decision
	failure, err := f.call(ctx, op, func(ctx context.Context) (err error) {
		res, err = fn(f.store, ctx, reqs, out)
		return err
	})
	if failure == nil {
		return res, err
	}
	f.degraded.Add(1)
	out = out[:start]
	if f.o.Mode == FailLocal {
		local := make([]Request, len(reqs))
		for i, r := range reqs {
			local[i] = Request{Key: r.Key, Policy: r.Policy.Divide(f.o.Replicas), Cost: r.Cost}
		}
		out, err = fn(f.o.Fallback, ctx, local, out)
		for i := start; i < len(out); i++ {
			out[i].Policy, out[i].Reason, out[i].Err = reqs[i-start].Policy.Name, fallbackReason(out[i].Reason), failure
		}
		return out, err
	}
	for _, r := range reqs {
		out = append(out, f.degrade(r.Policy, failure))
	}
	return out, nil
}

// fallbackReason keeps ReasonOtherLimit, which says more than ReasonFallback.
func fallbackReason(r Reason) Reason {
	if r == ReasonOtherLimit {
		return r
	}
	return ReasonFallback
}

// Settle settles on the store; while it fails, on the fallback (FailLocal)
// or not at all, the decision carrying the failure.
func (f *FailureStore) Settle(ctx context.Context, key string, p Policy, delta int64) (Decision, error) {
	var dec Decision
	failure, err := f.call(ctx, "settle", func(ctx context.Context) (err error) {
		dec, err = f.store.Settle(ctx, key, p, delta)
		return err
	})
	if failure == nil {
		return dec, err
	}
	f.degraded.Add(1)
	if f.o.Mode == FailLocal {
		dec, err = f.o.Fallback.Settle(ctx, key, p.Divide(f.o.Replicas), delta)
		dec.Policy, dec.Reason, dec.Err = p.Name, ReasonFallback, failure
		return dec, err
	}
	return f.degrade(p, failure), nil
}

// Reset resets key on the store (and on the fallback of FailLocal); a store
// failure is returned as the error.
func (f *FailureStore) Reset(ctx context.Context, key string, p Policy) error {
	if f.o.Mode == FailLocal {
		if err := f.o.Fallback.Reset(ctx, key, p.Divide(f.o.Replicas)); err != nil {
			return err
		}
	}
	failure, err := f.call(ctx, "reset", func(ctx context.Context) error {
		return f.store.Reset(ctx, key, p)
	})
	if failure != nil {
		return failure
	}
	return err
}
