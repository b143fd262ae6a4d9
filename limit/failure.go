package limit

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/costwise/batcher/internal/failover"
)

// FailureMode says how a FailureStore decides while its store fails. The
// same three modes are called FailOpen, FailClosed and FailFallback in the
// middlewares (httplimit, grpclimit) and in envoyrl, and fail_open,
// fail_closed and fallback in limiterd's configuration.
type FailureMode uint8

const (
	// FailOpen admits every request while the store fails (availability
	// first). It is the default.
	FailOpen FailureMode = iota
	// FailClosed denies every request while the store fails (protection
	// first); the decisions carry RetryAfter = FailureOptions.Probe.
	FailClosed
	// FailFallback decides on a local store (Fallback), the local
	// fallback, at the limit divided by the expected number of replicas
	// until the store answers again.
	FailFallback
)

// FailLocal is the former name of FailFallback.
//
// Deprecated: use FailFallback.
const FailLocal = FailFallback

// FailureOptions configure WithFailurePolicy. The zero value fails open, with
// no timeout of its own and a probe every second.
type FailureOptions struct {
	// Mode chooses fail-open (default), fail-closed or the local fallback.
	Mode FailureMode
	// Fallback is the store of FailFallback. Default a new Memory with
	// default options.
	Fallback Store
	// Replicas is the expected number of replicas sharing the store: the
	// fallback decides each policy divided by it (Policy.Divide). Default 1.
	Replicas int
	// Timeout bounds each call to the store, so that a slow store cannot
	// slow decisions past it; 0 leaves only the caller's context. The
	// store must return when its context ends (every store of this module
	// does, whatever its client's own timeouts).
	Timeout time.Duration
	// Probe is how long after a failure the store is not asked again:
	// decisions are made by the failure mode until then, without waiting
	// for a store that just failed. After it one call, the probe, goes to
	// the store; the others are decided by the failure mode until the probe
	// ends. Default 1 s.
	Probe time.Duration
	// OnFailure, when set, is called with every failure of the store (a
	// *StoreError), for logs and metrics. It must not block.
	OnFailure func(error)
	// Clock tells the time of the probe window, measured between its
	// readings with time.Time.Sub. Default the system clock, whose
	// readings carry monotonic time, so that a step of the wall clock does
	// not move the window.
	Clock Clock
}

// FailureStore is a Store that decides by its FailureMode while the store it
// wraps fails. A failure is an error matching ErrStoreFailed, or the wrapper's
// own Timeout; policy and cost errors, and the caller's context errors, pass
// through unchanged. Decisions made by the failure mode come back with a nil
// error, their Reason (ReasonFailOpen, ReasonFailClosed, ReasonFallback) and
// the failure in Decision.Err; each failure is counted and given to
// OnFailure. FailureStore is safe for concurrent use.
//
// After a failure the store is a half-open circuit: for Probe every call is
// decided by the failure mode at once; then one call at a time probes the
// store, the others decided by the mode, until a probe succeeds.
//
// A call the failure policy gave up on (its timeout) may still reach the
// store if its command was already written when it gave up: a store with a
// queue (redislimit's batches) drops the calls whose context ended before
// they were sent, but a command on the wire cannot be recalled. Such a call
// is decided by the failure mode and may also be charged on the store when
// the store resumes; see the store's documentation for how many can be.
type FailureStore struct {
	store    Store
	o        FailureOptions
	guard    *failover.Guard
	degraded atomic.Int64
}

// WithFailurePolicy wraps store with the failure policy of o.
func WithFailurePolicy(store Store, o FailureOptions) (*FailureStore, error) {
	if store == nil {
		return nil, &OptionError{Option: "store", Reason: "must not be nil"}
	}
	if o.Mode > FailFallback {
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
	if o.Mode == FailFallback && o.Fallback == nil {
		mem, err := NewMemory(MemoryOptions{})
		if err != nil {
			return nil, err
		}
		o.Fallback = mem
	}
	f := &FailureStore{store: store, o: o}
	f.guard = failover.New(failover.Options{Timeout: o.Timeout, Probe: o.Probe, Now: o.Clock.Now,
		Failure: failure, OnFailure: o.OnFailure})
	return f, nil
}

// failure tells a store failure, an error matching ErrStoreFailed (call
// turns the wrapper's own timeout into one), from the store's answer.
func failure(err error, _ bool) error {
	if errors.Is(err, ErrStoreFailed) {
		return err
	}
	return nil
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
	return FailureStats{Failures: f.guard.Failures(), Degraded: f.degraded.Load()}
}

// Down reports whether the store failed less than Probe ago, so that a
// call now would be decided by the failure mode without asking it.
func (f *FailureStore) Down() bool { return f.guard.Down() }

// call runs op on the store unless the circuit is open. It returns the
// store's failure (the last one while the store is not asked), or else
// op's own error.
func (f *FailureStore) call(ctx context.Context, op string, run func(context.Context) error) (failure error, err error) {
	return f.guard.Do(ctx, func(cctx context.Context) error {
		err := run(cctx)
		if err != nil && ctx.Err() == nil && cctx.Err() != nil && errors.Is(err, cctx.Err()) {
			return &StoreError{Op: op, Err: err} // the timeout, not the caller, ended op
		}
		return err
	})
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
	if f.o.Mode == FailFallback {
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
	if f.o.Mode == FailFallback {
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

// Settle settles on the store; while it fails, on the fallback (FailFallback)
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
	if f.o.Mode == FailFallback {
		dec, err = f.o.Fallback.Settle(ctx, key, p.Divide(f.o.Replicas), delta)
		dec.Policy, dec.Reason, dec.Err = p.Name, ReasonFallback, failure
		return dec, err
	}
	return f.degrade(p, failure), nil
}

// Reset resets key on the store (and on the fallback of FailFallback); a store
// failure is returned as the error.
func (f *FailureStore) Reset(ctx context.Context, key string, p Policy) error {
	if f.o.Mode == FailFallback {
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
