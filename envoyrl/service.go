package envoyrl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
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

// LimitStats is what one counted descriptor adds to its limit's counters
// in envoyproxy/ratelimit's statistics, counted in hits (hits_addend) as
// its base limiter counts them: every hit in TotalHits; a descriptor
// within its limit adds its hits to WithinLimit, and to NearLimit those
// that take the count above the near-limit threshold (Options.
// NearLimitRatio of the limit, rounded down); a descriptor over its limit
// adds to OverLimit the hits past the limit (all of them when the count
// was over already) and to NearLimit those between the threshold and the
// limit; one answered from the local cache adds all its hits to OverLimit
// and OverLimitWithLocalCache; a shadow_mode limit over its limit adds its
// over-limit hits to ShadowMode too.
type LimitStats struct {
	TotalHits, WithinLimit, NearLimit, OverLimit, OverLimitWithLocalCache, ShadowMode uint64
}

// StatsObserver is an Observer that also receives envoyproxy/ratelimit's
// statistics. Its methods are called outside every lock and must be safe
// for concurrent use.
type StatsObserver interface {
	Observer
	// Limit reports a counted descriptor's part of its limit's counters;
	// rule is the metrics label Observer.Descriptor receives.
	Limit(domain, rule string, st LimitStats)
	// GlobalShadowMode reports an answer that Options.ShadowMode turned
	// from OVER_LIMIT to OK.
	GlobalShadowMode()
	// BadRequest reports a request refused with ErrBadRequest.
	BadRequest()
}

// ResponseHeaders names the rate limit headers the service asks Envoy to
// add to the client's response (envoyproxy/ratelimit's
// LIMIT_RESPONSE_HEADERS_ENABLED with LIMIT_LIMIT_HEADER,
// LIMIT_REMAINING_HEADER and LIMIT_RESET_HEADER).
type ResponseHeaders struct {
	Limit, Remaining, Reset string
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
	// MaxJSONBodyBytes bounds the body JSONHandler reads; a larger one is
	// answered 413. Zero means DefaultMaxJSONBodyBytes (1 MiB).
	MaxJSONBodyBytes int64
	// NearLimitRatio is the share of a limit past which admitted hits are
	// near the limit in LimitStats (its NEAR_LIMIT_RATIO). Zero means 0.8,
	// its default; a negative value means 0.
	NearLimitRatio float64
	// LocalCacheBytes, when positive, keeps the counters found over their
	// limit in a local cache of about this many bytes (a key costs its
	// length plus 112 bytes; a full cache forgets its oldest keys first),
	// and answers them OVER_LIMIT without the store until their window
	// ends (its LOCAL_CACHE_SIZE_IN_BYTES). The other descriptors of such
	// a request are counted as usual, or, with
	// StopIncrementWhenOverLimit, only read.
	LocalCacheBytes int64
	// ResponseHeaders, when set, adds the three headers to every answer
	// with a limit: the limit, the remaining count and the seconds until
	// the window resets, of the last descriptor over its limit or, when
	// none is, of the one with the least remaining.
	ResponseHeaders *ResponseHeaders
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
	stats StatsObserver // Options.Observer when it is one
	cache *overCache    // nil without LocalCacheBytes
	ratio float32       // NearLimitRatio
}

// NewService returns a service over store with no rules: every descriptor
// is OK until SetRules.
func NewService(store Store, opts Options) *Service {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxJSONBodyBytes <= 0 {
		opts.MaxJSONBodyBytes = DefaultMaxJSONBodyBytes
	}
	if opts.KeyGrace == 0 {
		opts.KeyGrace = time.Second
	}
	s := &Service{store: store, opts: opts, cache: newOverCache(opts.LocalCacheBytes), ratio: 0.8}
	s.stats, _ = opts.Observer.(StatsObserver)
	switch {
	case opts.NearLimitRatio > 0:
		s.ratio = float32(opts.NearLimitRatio)
	case opts.NearLimitRatio < 0:
		s.ratio = 0
	}
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
	counter   int    // index in counters, -1 when not counted
	hits      uint64 // the hits asked for
	end       int64  // the end of the counter's window, Unix seconds
	local     bool   // over its limit in the local cache: not counted
}

// ShouldRateLimit decides a request. It fails with an error wrapping
// ErrBadRequest for a request envoyproxy/ratelimit refuses, with ctx's
// error unchanged when ctx ends first, and with a *StoreError when the
// store fails, its own timeout included.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := s.shouldRateLimit(ctx, req)
	if err != nil && s.stats != nil && errors.Is(err, ErrBadRequest) {
		s.stats.BadRequest()
	}
	return resp, err
}

func (s *Service) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
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
		if err := s.count(ctx, decisions, counters, now.Unix()); err != nil {
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
		ds[i].hits, ds[i].end = hitsAddend(req, d), window+l.divider
		counters = append(counters, Counter{
			Key:   s.counterKey(req.Domain, d, ds[i].match.Share, window),
			Hits:  ds[i].hits,
			TTL:   ttl,
			Limit: uint64(l.Proto.RequestsPerUnit),
			End:   ds[i].end,
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

// count adds the hits, but to the counters the local cache holds over
// their limit, which it leaves out (and with StopIncrementWhenOverLimit
// the others are then only read).
func (s *Service) count(ctx context.Context, ds []decision, counters []Counter, now int64) error {
	if s.cache == nil {
		return s.countStore(ctx, ds, counters)
	}
	var local []bool
	for i := range ds {
		if d := &ds[i]; d.counter >= 0 && s.cache.over(counters[d.counter].Key, now) {
			if local == nil {
				local = make([]bool, len(counters))
			}
			d.local, local[d.counter] = true, true
		}
	}
	if local == nil {
		return s.countStore(ctx, ds, counters)
	}
	rest := make([]Counter, 0, len(counters))
	at := make([]int, 0, len(counters))
	for i, c := range counters {
		if local[i] {
			continue
		}
		if s.opts.StopIncrementWhenOverLimit {
			c.Hits = 0
		}
		rest, at = append(rest, c), append(at, i)
	}
	if len(rest) == 0 {
		return nil
	}
	if err := s.store.Add(ctx, rest); err != nil {
		return err
	}
	for j, i := range at {
		counters[i].Count = rest[j].Count
	}
	return nil
}

// countStore adds the hits; with StopIncrementWhenOverLimit it first
// reads the counters and, when one would go over its limit, adds only to
// those that would, leaving the others as they are.
func (s *Service) countStore(ctx context.Context, ds []decision, counters []Counter) error {
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
	// The descriptor whose numbers the headers show: the last one over
	// its limit, else the first with the least remaining.
	var shown *rlsv3.RateLimitResponse_DescriptorStatus
	least := uint32(math.MaxUint32)
	for i, d := range ds {
		st, result := s.status(d, counters, now)
		resp.Statuses[i] = st
		if st.CurrentLimit != nil && st.LimitRemaining < least {
			shown, least = st, st.LimitRemaining
		}
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			if d.match.Limit.QuotaMode {
				// Reported, not enforced: OK with the limit and nothing
				// left, as envoyproxy/ratelimit answers a quota_mode rule.
				resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{
					Code: rlsv3.RateLimitResponse_OK, CurrentLimit: st.CurrentLimit, LimitRemaining: st.LimitRemaining,
				}
			} else {
				resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
				shown, least = st, 0
			}
		}
		if obs != nil {
			obs.Descriptor(req.Domain, d.match.Rule, result)
		}
		if s.stats != nil && d.counter >= 0 {
			s.stats.Limit(req.Domain, d.match.Rule, s.limitStats(d, counters))
		}
	}
	if h := s.opts.ResponseHeaders; h != nil && shown != nil {
		l := shown.CurrentLimit
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
			{Key: h.Limit, Value: strconv.FormatUint(uint64(l.RequestsPerUnit), 10)},
			{Key: h.Remaining, Value: strconv.FormatUint(uint64(shown.LimitRemaining), 10)},
			{Key: h.Reset, Value: strconv.FormatInt(shown.DurationUntilReset.GetSeconds(), 10)},
		}
	}
	if s.opts.ShadowMode && resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		resp.OverallCode = rlsv3.RateLimitResponse_OK
		if s.stats != nil {
			s.stats.GlobalShadowMode()
		}
	}
	return resp
}

// limitStats is a counted descriptor's LimitStats.
func (s *Service) limitStats(d decision, counters []Counter) LimitStats {
	hits := d.hits
	st := LimitStats{TotalHits: hits}
	shadow := d.match.Limit.ShadowMode
	if d.local {
		st.OverLimit, st.OverLimitWithLocalCache = hits, hits
		if shadow {
			st.ShadowMode = hits
		}
		return st
	}
	limit := uint64(d.match.Limit.Proto.RequestsPerUnit)
	near := min(uint64(math.Floor(float64(float32(limit)*s.ratio))), limit)
	after := counters[d.counter].Count
	before := after - min(hits, after)
	if after > limit {
		if before >= limit {
			st.OverLimit = hits
		} else {
			st.OverLimit = after - limit
			st.NearLimit = limit - max(near, before)
		}
		if shadow {
			st.ShadowMode = st.OverLimit
		}
		return st
	}
	if after > near {
		if before >= near {
			st.NearLimit = hits
		} else {
			st.NearLimit = after - near
		}
	}
	st.WithinLimit = hits
	return st
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
	if !d.local && after <= limit {
		st.LimitRemaining = uint32(limit - after)
		return st, "ok"
	}
	if !d.local && s.cache != nil {
		s.cache.add(counters[d.counter].Key, d.end)
	}
	if l.ShadowMode {
		return st, "shadow_over_limit"
	}
	st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	return st, "over_limit"
}
