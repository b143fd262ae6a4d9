// Package engine is the framework-neutral core of the HTTP middleware and
// the gRPC interceptors: it decides a request's policies together, applies
// the store timeout, the failure mode and shadow mode, and counts the
// outcome. The frameworks only find keys and costs and write responses.
package engine

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/costwise/batcher/middleware/limitcore"
)

// MaxPolicies is the most policies one middleware decides per request;
// outcomes hold their results inline, so a decision allocates nothing.
const MaxPolicies = 8

// Result is one policy's part of a decision.
type Result struct {
	Allowed    bool
	Limit      int64         // the quota: the most the key can spend at once
	Remaining  int64         // what the key can still spend now
	RetryAfter time.Duration // for a denial: the wait until the cost fits; 0 if it never will
	Reset      time.Duration // the time until the key is back at rest
}

// Backend decides cost for the policies listed (indices into the policy
// list the engine was built with) under the matching keys, all or nothing,
// writing one result per listed policy into out. An error means the store
// could not decide; out is then ignored.
type Backend interface {
	Decide(ctx context.Context, policies []int, keys []string, cost int64, out []Result) error
}

// FailMode is what happens to a request when the store fails.
type FailMode = limitcore.FailMode

const (
	FailOpen     = limitcore.FailOpen     // admit the request, counted
	FailClosed   = limitcore.FailClosed   // refuse it with 503 (or UNAVAILABLE)
	FailFallback = limitcore.FailFallback // decide it on the fallback backend
)

// Action is what the frontend must do with the request.
type Action int

const (
	Allow      Action = iota // serve it
	Deny                     // answer 429 / RESOURCE_EXHAUSTED
	FailDenied               // answer 503 / UNAVAILABLE: store failed, fail-closed
)

// Outcome is the decision for one request.
type Outcome struct {
	Action Action
	// N is how many policies applied; Policies[:N] are their indices and
	// Results[:N] their results. N is 0 when the store failed open or
	// closed: there is nothing to report in headers then.
	N        int
	Policies [MaxPolicies]int
	Results  [MaxPolicies]Result
	// RetryAfter is, for Deny, the longest retry delay of the denying
	// policies (0 if a cost can never fit); for FailDenied, the configured
	// retry delay.
	RetryAfter time.Duration
	// Shadow reports that the policies denied the request but shadow mode
	// let it through.
	Shadow bool
	// Err is the store's error, when it failed.
	Err error

	keys [MaxPolicies]string // the applied policies' keys
}

// Config builds an Engine.
type Config struct {
	Policies []string // names, for metrics
	Backend  Backend
	Fallback Backend // used with FailFallback
	Mode     FailMode
	// Timeout bounds each decision on the store; 0 means no bound beyond
	// the request's own context.
	Timeout time.Duration
	// FailRetry is the Retry-After of a fail-closed refusal.
	FailRetry time.Duration
	Shadow    bool
	Recorder  limitcore.Recorder // nil: not counted
	Now       func() time.Time

	// failuresCounted: the store's failure policy counts its failures
	// itself (Build's OnFailure hook), so decisions it made are not
	// counted again as store errors.
	failuresCounted bool
}

// Engine decides requests. It is safe for concurrent use.
type Engine struct {
	c Config
}

// ErrTooManyPolicies is returned by New for more than MaxPolicies policies.
var ErrTooManyPolicies = errors.New("too many policies")

// New returns an engine for c; c.Now nil means time.Now.
func New(c Config) (*Engine, error) {
	if len(c.Policies) > MaxPolicies {
		return nil, ErrTooManyPolicies
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return &Engine{c: c}, nil
}

// Decide decides cost under keys, one per policy ("" skips that policy),
// and fills o. A request no policy applies to is allowed without a store
// call.
func (e *Engine) Decide(ctx context.Context, keys []string, cost int64, o *Outcome) {
	ks := &o.keys // in the pooled outcome: a local array would escape through Backend
	n := 0
	for i, k := range keys {
		if k != "" {
			o.Policies[n], ks[n] = i, k
			n++
		}
	}
	o.N = n
	if n == 0 {
		o.Action = Allow
		return
	}
	if e.c.Recorder != nil {
		start := e.c.Now()
		defer func() { e.c.Recorder.Duration(e.c.Now().Sub(start)) }()
	}
	err := e.decide(ctx, e.c.Backend, o.Policies[:n], ks[:n], cost, o.Results[:n])
	if err == nil {
		e.settle(o)
		return
	}
	var dec *Decided
	decided := errors.As(err, &dec)
	if ctx.Err() == nil && !(decided && e.c.failuresCounted) { // a caller that went away is no store failure
		e.storeError()
	}
	o.Err = err
	if decided { // the store's own failure policy decided
		o.Err = dec.Err
		if dec.Mode == FailFallback {
			e.settle(o)
		} else {
			e.failed(o, dec.Mode, decidedRetry(o))
		}
		return
	}
	if e.c.Mode == FailFallback && e.c.Fallback != nil {
		if err = e.decide(ctx, e.c.Fallback, o.Policies[:n], ks[:n], cost, o.Results[:n]); err == nil {
			e.settle(o)
			return
		}
	}
	e.failed(o, e.c.Mode, 0)
}

// decidedRetry is the retry delay the store's own failure policy gave a
// request it refused (its Probe), 0 if none: a store wrapped by
// limit.WithFailurePolicy before it reached the middleware keeps its
// settings.
func decidedRetry(o *Outcome) time.Duration {
	var retry time.Duration
	for i := range o.Results[:o.N] {
		if r := &o.Results[i]; !r.Allowed {
			retry = max(retry, r.RetryAfter)
		}
	}
	return retry
}

// decide calls b with the store timeout applied.
func (e *Engine) decide(ctx context.Context, b Backend, ps []int, ks []string, cost int64, out []Result) error {
	if e.c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.c.Timeout)
		defer cancel()
	}
	return b.Decide(ctx, ps, ks, cost, out)
}

// failed sets o for a store failure the fallback did not cover; a
// fail-closed refusal asks for retry, or FailRetry when retry is 0.
func (e *Engine) failed(o *Outcome, mode FailMode, retry time.Duration) {
	result := limitcore.ResultFailedOpen
	o.Action = Allow
	if mode == FailClosed {
		result = limitcore.ResultFailedClosed
		o.Action, o.RetryAfter = FailDenied, cmp.Or(retry, e.c.FailRetry)
	}
	e.countAll(o, result)
	o.N = 0
}

// settle sets o's action from its results and counts them.
func (e *Engine) settle(o *Outcome) {
	denied := false
	for i := range o.Results[:o.N] {
		r := &o.Results[i]
		if !r.Allowed {
			denied = true
			if r.RetryAfter > o.RetryAfter {
				o.RetryAfter = r.RetryAfter
			}
		}
	}
	if denied && e.hasNever(o) {
		o.RetryAfter = 0 // some policy never admits this cost: no retry helps
	}
	switch {
	case !denied:
		o.Action = Allow
		e.countAll(o, limitcore.ResultAllowed)
	case e.c.Shadow:
		o.Action, o.Shadow = Allow, true
		e.countAll(o, limitcore.ResultShadowDenied)
	default:
		o.Action = Deny
		e.countAll(o, limitcore.ResultDenied)
	}
}

// hasNever reports whether a policy denied with no retry delay: the cost
// exceeds what it could ever admit.
func (e *Engine) hasNever(o *Outcome) bool {
	for i := range o.Results[:o.N] {
		if r := &o.Results[i]; !r.Allowed && r.RetryAfter <= 0 {
			return true
		}
	}
	return false
}

// countAll counts one decision per applied policy. Policies that admitted a
// request that another denied are counted under the request's result: the
// request was not served, so nothing was spent on them either.
func (e *Engine) countAll(o *Outcome, result limitcore.Result) {
	if e.c.Recorder == nil {
		return
	}
	for _, p := range o.Policies[:o.N] {
		e.c.Recorder.Decision(p, result)
	}
}

// storeError counts a store failure.
func (e *Engine) storeError() {
	if e.c.Recorder != nil {
		e.c.Recorder.StoreError()
	}
}

// Names returns the policy names.
func (e *Engine) Names() []string { return e.c.Policies }

// Now returns the engine's time.
func (e *Engine) Now() time.Time { return e.c.Now() }

// outcomes recycles Outcomes: they are too large to copy and, passed to a
// Backend through an interface, would otherwise escape once per request.
var outcomes = sync.Pool{New: func() any { return new(Outcome) }}

// GetOutcome returns a zeroed Outcome; give it back with PutOutcome.
func GetOutcome() *Outcome {
	return outcomes.Get().(*Outcome)
}

// PutOutcome clears o and returns it to the pool.
func PutOutcome(o *Outcome) {
	*o = Outcome{}
	outcomes.Put(o)
}

// BackendFunc adapts a function to Backend.
type BackendFunc func(ctx context.Context, policies []int, keys []string, cost int64, out []Result) error

// Decide calls f.
func (f BackendFunc) Decide(ctx context.Context, policies []int, keys []string, cost int64, out []Result) error {
	return f(ctx, policies, keys, cost, out)
}
