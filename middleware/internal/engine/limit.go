package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/costwise/batcher/limit"
)

// Decided is the error a Backend returns when the store failed but a
// failure policy of package limit (limit.WithFailurePolicy) decided anyway:
// the results are valid and Mode says how they were made.
type Decided struct {
	Err  error
	Mode FailMode
}

// Error returns the store failure's message.
func (d *Decided) Error() string { return d.Err.Error() }

// Unwrap returns the store failure.
func (d *Decided) Unwrap() error { return d.Err }

// LimitBackend decides on a store of package limit, with AllowAll: every
// applied policy spends the cost or none does.
type LimitBackend struct {
	store    limit.Store
	policies []limit.Policy
}

// NewLimitBackend returns a backend deciding policies on store.
func NewLimitBackend(store limit.Store, policies []limit.Policy) *LimitBackend {
	return &LimitBackend{store: store, policies: policies}
}

// scratch holds one decision's requests and answers; pooled, because slices
// passed through the Store interface escape.
type scratch struct {
	reqs [MaxPolicies]limit.Request
	decs [MaxPolicies]limit.Decision
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// Decide implements Backend.
func (b *LimitBackend) Decide(ctx context.Context, ps []int, ks []string, cost int64, out []Result) error {
	if len(ps) == 1 { // one limit: AllowN, which allocates nothing for a known key
		d, err := b.store.AllowN(ctx, ks[0], b.policies[ps[0]], cost)
		if err != nil && !errors.Is(err, limit.ErrTooManyKeys) {
			return err
		}
		return b.result(&d, errors.Is(err, limit.ErrTooManyKeys), out)
	}
	s := scratches.Get().(*scratch)
	defer scratches.Put(s)
	for i, p := range ps {
		s.reqs[i] = limit.Request{Key: ks[i], Policy: b.policies[p], Cost: cost}
	}
	ds, err := b.store.AllowAll(ctx, s.reqs[:len(ps)], s.decs[:0])
	tooMany := errors.Is(err, limit.ErrTooManyKeys)
	if err != nil && !tooMany {
		return err
	}
	if len(ds) != len(ps) {
		return errShortAnswer
	}
	for i := range ps {
		s.reqs[i] = limit.Request{} // drop the keys: the pool must not pin them
	}
	var decided error
	for i := range ds {
		if err := b.result(&ds[i], tooMany, out[i:i+1]); err != nil && decided == nil {
			decided = err // one failure policy made every decision of the call
		}
	}
	return decided
}

// result converts d into out[0]; it returns a *Decided when a failure
// policy made d.
func (b *LimitBackend) result(d *limit.Decision, tooMany bool, out []Result) error {
	out[0] = Result{
		Allowed: d.Allowed || d.Reason == limit.ReasonOtherLimit, Limit: d.Limit, Remaining: d.Remaining,
		RetryAfter: d.RetryAfter, Reset: d.ResetAfter,
	}
	if tooMany && !d.Allowed && d.RetryAfter == 0 {
		out[0].RetryAfter = time.Second // the store is full: try again soon, not never
	}
	if d.Err == nil {
		return nil
	}
	return &Decided{Err: d.Err, Mode: decidedBy(d.Reason)}
}

// decidedBy returns the failure mode that made a decision carrying a store
// failure. Only fail-open and fail-closed decide without a store; every
// other reason comes from the local fallback, including ReasonOtherLimit:
// in an all-or-nothing fallback decision, the policies another one denied
// keep that reason, and taking them for fail-open admitted the request.
func decidedBy(r limit.Reason) FailMode {
	switch r {
	case limit.ReasonFailOpen:
		return FailOpen
	case limit.ReasonFailClosed:
		return FailClosed
	}
	return FailFallback
}

var errShortAnswer = errors.New("limit store answered a different number of decisions")

// Window returns the time window a policy's quota refers to, for the
// w parameter of RateLimit-Policy: the window of the window algorithms,
// and for the token bucket and GCRA the time to refill the whole limit
// from empty.
func Window(p limit.Policy) time.Duration {
	switch p.Algorithm {
	case limit.TokenBucketAlgorithm, limit.GCRAAlgorithm:
		if p.Rate.Count <= 0 {
			return 0
		}
		return time.Duration(float64(p.Rate.Period) * float64(p.Limit) / float64(p.Rate.Count))
	}
	return p.Window
}
