package envoyrl

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Counter is one fixed-window counter a decision adds to or reads.
type Counter struct {
	// Key names the counter: prefix, domain, the descriptor's entries and
	// the window's start in Unix seconds, as envoyproxy/ratelimit names it.
	Key string
	// Hits is what to add; 0 only reads.
	Hits uint64
	// TTL is how long the counter must live past now: the rest of its window.
	TTL time.Duration
	// Count is set by the store: the counter's value after adding Hits.
	Count uint64
	// Limit is the counter's limit per window and End the end of its
	// window (Unix seconds), for stores that lend a window's units ahead
	// (redisstore's Options.LocalAllowance); other stores ignore them.
	Limit uint64
	End   int64
}

// Store holds fixed-window counters. Implementations are safe for
// concurrent use; this package has an in-memory one (NewMemoryStore), the
// redisstore package a Redis one.
type Store interface {
	// Add adds each counter's Hits, creating counters that are absent with
	// their TTL, and sets each Count to the value after the addition. A
	// counter listed twice is added to twice, in order.
	Add(ctx context.Context, counters []Counter) error
	// Get sets each Count to the counter's current value, 0 when absent.
	Get(ctx context.Context, counters []Counter) error
}

// Observer receives what the service decides, for metrics. Its methods are
// called outside every lock and must be safe for concurrent use.
type Observer interface {
	// Descriptor reports one descriptor's result: "ok", "over_limit",
	// "shadow_over_limit", "unlimited" or "no_rule".
	Descriptor(domain, rule, result string)
	// StoreError reports a store that failed a decision.
	StoreError(err error)
}

// Options tune a Service. The zero value behaves as envoyproxy/ratelimit's
// defaults do.
type Options struct {
	// StopIncrementWhenOverLimit adds nothing to a request's counters when
	// one of them would go over its limit, except to those that go over
	// (envoyproxy/ratelimit's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).
	// Default false: every descriptor of a request is counted.
	StopIncrementWhenOverLimit bool
	// ShadowMode answers OK overall whatever the descriptors say (its
	// SHADOW_MODE).
	ShadowMode bool
	// KeyPrefix starts every counter key (its CACHE_KEY_PREFIX).
	KeyPrefix string
	// KeyGrace keeps a counter this long past its window's end, for clock
	// skew between replicas. Default 1 s.
	KeyGrace time.Duration
	// Now is the clock the windows are read from; time.Now by default.
	Now func() time.Time
	// Observer receives decisions; none by default.
	Observer Observer
	// MaxDescriptors bounds the descriptors of a request, and
	// MaxDescriptorEntries the entries of a descriptor; a request with
	// more is refused with ErrBadRequest. Zero means no bound.
	MaxDescriptors, MaxDescriptorEntries int
	// MaxKeyBytes bounds a descriptor's domain, entry keys and values
	// together, what its counter key is made of; a longer one is refused
	// with ErrBadRequest. Zero means no bound.
	MaxKeyBytes int
}

// ErrBadRequest marks a request the service refuses: an empty domain, no
// descriptors, an override with an unknown unit.
var ErrBadRequest = errors.New("envoyrl: bad request")

// StoreError wraps a store's failure.
type StoreError struct{ Err error }

// Error implements error.
func (e *StoreError) Error() string { return "envoyrl: store: " + e.Err.Error() }

// Unwrap returns the store's error.
func (e *StoreError) Unwrap() error { return e.Err }

// Service answers Envoy's ShouldRateLimit with envoyproxy/ratelimit's rule
// semantics over a Store. Its rules can be replaced at any time (SetRules);
// a request sees one set of rules. It is safe for concurrent use.
type Service struct {
	rules atomic.Pointer[Rules]
	store Store
	opts  Options
}

// NewService returns a service over store with no rules: every descriptor
// is OK until SetRules.
func NewService(store Store, opts Options) *Service {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.KeyGrace == 0 {
		opts.KeyGrace = time.Second
	}
	s := &Service{store: store, opts: opts}
	s.rules.Store(&Rules{domains: map[string]*node{}})
	return s
}

// SetRules replaces the rules for the requests that start after it.
func (s *Service) SetRules(r *Rules) { s.rules.Store(r) }

// Rules returns the rules in force.
func (s *Service) Rules() *Rules { return s.rules.Load() }

// decision is one descriptor's part of a request, in request order.
type decision struct {
	match     Match
	unlimited bool
	counter   int // index in counters, -1 when not counted
}

// ShouldRateLimit decides a request. It fails with an error wrapping
// ErrBadRequest for a request envoyproxy/ratelimit refuses, with ctx's
// error unchanged when ctx ends first, and with a *StoreError when the
// store fails, its own timeout included.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, fmt.Errorf("%w: rate limit domain must not be empty", ErrBadRequest)
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, fmt.Errorf("%w: rate limit descriptor list must not be empty", ErrBadRequest)
	}
	if err := s.checkSize(req); err != nil {
		return nil, err
	}
	now := s.opts.Now()
	decisions, counters, err := s.plan(req, now.Unix())
	if err != nil {
		return nil, err
	}
	if len(counters) > 0 {
		if err := s.count(ctx, decisions, counters); err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
				return nil, ctxErr // the caller left: no store failure
			}
			if s.opts.Observer != nil {
				s.opts.Observer.StoreError(err)
			}
			var se *StoreError
			if !errors.As(err, &se) {
				err = &StoreError{err}
			}
			return nil, err
		}
	}
	return s.respond(req, decisions, counters, now.Unix()), nil
}

// checkSize refuses a request past the bounds of Options.
func (s *Service) checkSize(req *rlsv3.RateLimitRequest) error {
	o := &s.opts
	if o.MaxDescriptors > 0 && len(req.Descriptors) > o.MaxDescriptors {
		return fmt.Errorf("%w: %d descriptors, more than %d", ErrBadRequest, len(req.Descriptors), o.MaxDescriptors)
	}
	for i, d := range req.Descriptors {
		if o.MaxDescriptorEntries > 0 && len(d.GetEntries()) > o.MaxDescriptorEntries {
			return fmt.Errorf("%w: descriptor %d: %d entries, more than %d", ErrBadRequest, i, len(d.GetEntries()), o.MaxDescriptorEntries)
		}
		if o.MaxKeyBytes <= 0 {
			continue
		}
		n := len(req.Domain)
		for _, e := range d.GetEntries() {
			n += len(e.GetKey()) + len(e.GetValue()) + 2
		}
		if n > o.MaxKeyBytes {
			return fmt.Errorf("%w: descriptor %d: key of %d bytes, longer than %d", ErrBadRequest, i, n, o.MaxKeyBytes)
		}
	}
	return nil
}

// plan matches every descriptor, applies replaces, and lists the counters.
func (s *Service) plan(req *rlsv3.RateLimitRequest, now int64) ([]decision, []Counter, error) {
	rules := s.rules.Load()
	ds := make([]decision, len(req.Descriptors))
	var replaced map[string]bool
	for i, d := range req.Descriptors {
		ds[i] = decision{match: rules.Match(req.Domain, d), counter: -1}
		l := ds[i].match.Limit
		if l == nil {
			continue
		}
		if l.divider == 0 && !l.Unlimited {
			return nil, nil, fmt.Errorf("%w: descriptor %d: unknown limit unit %v", ErrBadRequest, i, l.Proto.GetUnit())
		}
		for _, name := range l.Replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[name] = true
		}
		if l.Unlimited {
			ds[i].unlimited = true
			ds[i].match.Limit = nil
		}
	}
	var counters []Counter
	for i, d := range req.Descriptors {
		l := ds[i].match.Limit
		if l == nil {
			continue
		}
		if l.Name != "" && replaced[l.Name] {
			ds[i].match.Limit = nil
			continue
		}
		ds[i].counter = len(counters)
		window := now / l.divider * l.divider
		ttl := time.Duration(window+l.divider-now)*time.Second + s.opts.KeyGrace
		counters = append(counters, Counter{
			Key:   s.counterKey(req.Domain, d, ds[i].match.Share, window),
			Hits:  hitsAddend(req, d),
			TTL:   ttl,
			Limit: uint64(l.Proto.RequestsPerUnit),
			End:   window + l.divider,
		})
	}
	return ds, counters, nil
}

// hitsAddend is a descriptor's cost: its own hits_addend when set (even 0),
// else the request's, where 0 means 1.
func hitsAddend(req *rlsv3.RateLimitRequest, d *rlv3.RateLimitDescriptor) uint64 {
	if h := d.GetHitsAddend(); h != nil {
		return h.GetValue()
	}
	return max(1, uint64(req.GetHitsAddend()))
}

// counterKey names a counter as envoyproxy/ratelimit does, so both services
// can count in one Redis.
func (s *Service) counterKey(domain string, d *rlv3.RateLimitDescriptor, share []string, window int64) string {
	n := len(s.opts.KeyPrefix) + len(domain) + 12
	for _, e := range d.GetEntries() {
		n += len(e.GetKey()) + len(e.GetValue()) + 2
	}
	b := make([]byte, 0, n)
	b = append(b, s.opts.KeyPrefix...)
	b = append(b, domain...)
	b = append(b, '_')
	for i, e := range d.GetEntries() {
		b = append(b, e.GetKey()...)
		b = append(b, '_')
		if i < len(share) && share[i] != "" {
			b = append(b, share[i]...)
		} else {
			b = append(b, e.GetValue()...)
		}
		b = append(b, '_')
	}
	b = strconv.AppendInt(b, window, 10)
	return string(b)
}

// count adds the hits; with StopIncrementWhenOverLimit it first reads the
// counters and, when one would go over its limit, adds only to those that
// would, leaving the others as they are.
func (s *Service) count(ctx context.Context, ds []decision, counters []Counter) error {
	if !s.opts.StopIncrementWhenOverLimit {
		return s.store.Add(ctx, counters)
	}
	hits := make([]uint64, len(counters))
	for i := range counters {
		hits[i], counters[i].Hits = counters[i].Hits, 0
	}
	if err := s.store.Get(ctx, counters); err != nil {
		return err
	}
	over := make([]bool, len(counters))
	anyOver := false
	for _, d := range ds {
		if d.counter < 0 {
			continue
		}
		c := counters[d.counter]
		over[d.counter] = c.Count+hits[d.counter] > uint64(d.match.Limit.Proto.RequestsPerUnit)
		anyOver = anyOver || over[d.counter]
	}
	for i := range counters {
		if !anyOver || over[i] {
			counters[i].Hits = hits[i]
		}
	}
	return s.store.Add(ctx, counters)
}

// respond builds the response from the counted values.
func (s *Service) respond(req *rlsv3.RateLimitRequest, ds []decision, counters []Counter, now int64) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(ds)),
	}
	obs := s.opts.Observer
	for i, d := range ds {
		st, result := s.status(d, counters, now)
		resp.Statuses[i] = st
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if obs != nil {
			obs.Descriptor(req.Domain, d.match.Rule, result)
		}
	}
	if s.opts.ShadowMode {
		resp.OverallCode = rlsv3.RateLimitResponse_OK
	}
	return resp
}

// status is one descriptor's answer and its metrics result.
func (s *Service) status(d decision, counters []Counter, now int64) (*rlsv3.RateLimitResponse_DescriptorStatus, string) {
	switch {
	case d.unlimited:
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: unlimitedRemaining}, "unlimited"
	case d.counter < 0:
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}, "no_rule"
	}
	l := d.match.Limit
	after := counters[d.counter].Count
	limit := uint64(l.Proto.RequestsPerUnit)
	st := &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:               rlsv3.RateLimitResponse_OK,
		CurrentLimit:       l.Proto,
		DurationUntilReset: &durationpb.Duration{Seconds: l.divider - now%l.divider},
	}
	if after <= limit {
		st.LimitRemaining = uint32(limit - after)
		return st, "ok"
	}
	if l.ShadowMode {
		return st, "shadow_over_limit"
	}
	st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	return st, "over_limit"
}
