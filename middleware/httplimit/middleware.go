package httplimit

import (
	"context"
	"net/http"
	"net/netip"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/middleware/internal/engine"
	"github.com/costwise/batcher/middleware/limitcore"
)

// Default values of Options.
const (
	DefaultStoreTimeout         = limitcore.DefaultStoreTimeout
	DefaultFailClosedRetryAfter = limitcore.DefaultFailClosedRetryAfter
	DefaultNamespace            = limitcore.DefaultNamespace
	DefaultSubsystem            = "http_limit"
)

// Options configures a Middleware. Policies and Store are required; every
// other field has a working default.
type Options struct {
	// Policies are decided together for every request: it spends its cost
	// on every policy whose key is not empty, or on none. At most 8.
	Policies []Policy
	// Store decides the limits: limit's in-memory store, or its Redis
	// store. Required.
	Store Store
	// Cost is what a request spends in every policy; nil means 1 per
	// request. Negative costs count as 0.
	Cost CostFunc
	// Headers is the format of the rate-limit fields on every response
	// that a policy applied to; the default is HeaderDraft.
	Headers HeaderFormat
	// OnStoreError chooses between FailOpen (the default), FailClosed and
	// FailFallback.
	OnStoreError FailMode
	// Fallback is the local store FailFallback decides on; nil means a new
	// limit.Memory.
	Fallback Store
	// FallbackReplicas is the number of replicas sharing the store: the
	// fallback decides each limit divided by it. Zero means 1.
	FallbackReplicas int
	// StoreTimeout bounds each decision on the store, so a slow store
	// cannot hold requests longer; zero means DefaultStoreTimeout, a
	// negative value no bound beyond the request's context. After a
	// failure the store is left alone for FailClosedRetryAfter and requests
	// are decided by OnStoreError at once. A limit.Memory, which cannot
	// fail or block, and a store already wrapped by limit.WithFailurePolicy
	// (whose settings then apply) are used as they are.
	StoreTimeout time.Duration
	// FailClosedRetryAfter is the Retry-After of a FailClosed refusal and
	// the time a failed store is left alone; zero means
	// DefaultFailClosedRetryAfter.
	FailClosedRetryAfter time.Duration
	// OnStoreFailure, if not nil, is called with every store failure (a
	// *limit.StoreError); it must not block.
	OnStoreFailure func(error)
	// Shadow decides, counts and writes headers as usual but never refuses
	// a request: a limit being rolled out shows what it would deny
	// (result "shadow_denied") before it denies anything.
	Shadow bool
	// ClientIP finds client addresses for KeyIP policies that leave it nil
	// and for AllowCIDRs; nil means the zero ClientIP (RemoteAddr only).
	ClientIP *ClientIP
	// AllowCIDRs are client networks that are never limited.
	AllowCIDRs []netip.Prefix
	// AllowKeys are keys that are never limited: a request with any of
	// them as a policy's key skips every policy.
	AllowKeys []string
	// DeniedHandler answers denied requests instead of the default 429
	// problem+json body. The rate-limit fields and Retry-After are already
	// set on its ResponseWriter, and DenialFromContext gives the details.
	DeniedHandler http.Handler
	// MetricsProvider receives the middleware's metrics; nil records none.
	// promlimit.New(reg) records them on a Prometheus registry: middlewares
	// sharing a registry share the metrics (told apart by the policy
	// label), unless Metrics.ConstLabels differ.
	MetricsProvider MetricsProvider
	// Metrics names the metrics; the zero value gives
	// batcher_http_limit_decisions_total{policy,result},
	// batcher_http_limit_decision_duration_seconds and
	// batcher_http_limit_store_errors_total.
	Metrics MetricsOptions
	// Registerer is a prometheus.Registerer to record the metrics on, as
	// MetricsProvider: promlimit.New(Registerer) does. It works only in a
	// program that links package promlimit in (imports it anywhere); New
	// returns a *ConfigError otherwise, and when MetricsProvider is set too.
	//
	// Deprecated: set MetricsProvider to promlimit.New(reg), which keeps
	// Prometheus out of programs that do not use it.
	Registerer any
	// Now is the clock of the rate-limit headers and of the latency
	// histogram; nil means time.Now. The limits themselves run on the
	// store's clock.
	Now func() time.Time
}

// Middleware applies rate-limit policies to HTTP requests. It is safe for
// concurrent use.
type Middleware struct {
	opts     Options
	eng      *engine.Engine
	keys     []KeyFunc
	policyHV []string // the RateLimit-Policy item of each policy
	quotas   []int64  // the quota of each policy
	statuses []Status // per policy: name and window, the constant part
	allowIPs []netip.Prefix
	allowKey map[string]struct{}
	ip       *ClientIP
}

// New returns the middleware for opts, or a *ConfigError.
func New(opts Options) (*Middleware, error) {
	opts.Policies = append([]Policy(nil), opts.Policies...) // named() below must not change the caller's
	m := &Middleware{opts: opts, ip: opts.ClientIP}
	if m.ip == nil {
		m.ip = &ClientIP{}
	}
	if err := m.ip.Validate(); err != nil {
		return nil, &ConfigError{Field: "ClientIP", Reason: err.Error(), Package: "httplimit"}
	}
	m.setPolicies()
	if m.opts.Cost == nil {
		m.opts.Cost = CostOne
	}
	if m.opts.Now == nil {
		m.opts.Now = time.Now
	}
	m.allowIPs = opts.AllowCIDRs
	if len(opts.AllowKeys) > 0 {
		m.allowKey = make(map[string]struct{}, len(opts.AllowKeys))
		for _, k := range opts.AllowKeys {
			m.allowKey[k] = struct{}{}
		}
	}
	var err error
	if m.eng, err = m.build(); err != nil {
		return nil, err
	}
	return m, nil
}

// setPolicies names the policies and keeps their constant parts; build
// checks them.
func (m *Middleware) setPolicies() {
	for i := range m.opts.Policies {
		p := &m.opts.Policies[i]
		p.Name, p.Limit = engine.Named(p.Name, p.Limit)
		key := p.Key
		if key == nil {
			key = m.ip.Key
		}
		quota, window := p.Limit.Limit, engine.Window(p.Limit)
		m.keys = append(m.keys, key)
		m.policyHV = append(m.policyHV, PolicyField(p.Name, quota, window))
		m.quotas = append(m.quotas, quota)
		m.statuses = append(m.statuses, Status{Policy: p.Name, Window: window})
	}
}

// build checks the options and builds the engine.
func (m *Middleware) build() (*engine.Engine, error) {
	o := &m.opts
	names := make([]string, len(o.Policies))
	limits := make([]limit.Policy, len(o.Policies))
	for i, p := range o.Policies {
		names[i], limits[i] = p.Name, p.Limit
	}
	mo := o.Metrics
	if mo.Namespace == "" {
		mo.Namespace = DefaultNamespace
	}
	if mo.Subsystem == "" {
		mo.Subsystem = DefaultSubsystem
	}
	return engine.Build(engine.Options{
		Package: "httplimit", Names: names, Limits: limits, Store: o.Store, Mode: o.OnStoreError,
		Fallback: o.Fallback, Replicas: o.FallbackReplicas, Timeout: o.StoreTimeout,
		DefaultTimeout: DefaultStoreTimeout, FailRetry: o.FailClosedRetryAfter, Shadow: o.Shadow,
		OnFailure: o.OnStoreFailure, MetricsProvider: o.MetricsProvider, Registerer: o.Registerer,
		MetricsNames: mo, Now: o.Now,
	})
}

// Handler returns next wrapped by the middleware; its signature is the
// func(http.Handler) http.Handler of net/http middleware, so
// router.Use(m.Handler) works with chi and gorilla/mux.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, next)
	})
}

// serve decides r and serves it, or answers for next.
func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	var keys [engine.MaxPolicies]string
	n := len(m.keys)
	for i, k := range m.keys {
		keys[i] = k(r)
	}
	if m.allowListed(r, keys[:n]) {
		next.ServeHTTP(w, r)
		return
	}
	cost := m.opts.Cost(r)
	if cost < 0 {
		cost = 0
	}
	o := engine.GetOutcome()
	defer engine.PutOutcome(o)
	m.eng.Decide(r.Context(), keys[:n], cost, o)
	switch o.Action {
	case engine.Deny:
		m.deny(w, r, o)
	case engine.FailDenied:
		RetryAfter(w.Header(), o.RetryAfter)
		WriteProblem(w, Unavailable(o.RetryAfter))
	default:
		m.writeHeaders(w.Header(), o)
		next.ServeHTTP(w, r)
	}
}

// allowListed reports whether the client's network or one of its keys is
// on the allow-list.
func (m *Middleware) allowListed(r *http.Request, keys []string) bool {
	if m.allowKey != nil {
		for _, k := range keys {
			if _, ok := m.allowKey[k]; ok && k != "" {
				return true
			}
		}
	}
	if len(m.allowIPs) > 0 {
		if a, ok := m.ip.Addr(r); ok {
			for _, p := range m.allowIPs {
				if p.Contains(a) {
					return true
				}
			}
		}
	}
	return false
}

// writeHeaders writes the rate-limit fields for the policy of o closest to
// its limit.
func (m *Middleware) writeHeaders(h http.Header, o *engine.Outcome) {
	if o.N == 0 || m.opts.Headers == HeaderNone {
		return
	}
	var st [engine.MaxPolicies]Status
	for i := range o.Results[:o.N] {
		st[i] = m.status(o, i)
	}
	i := Closest(st[:o.N])
	best, bestPolicy := &st[i], o.Policies[i]
	var now time.Time
	if m.opts.Headers == HeaderX { // the only format that needs the time
		now = m.opts.Now()
	}
	policy := m.policyHV[bestPolicy]
	if best.Limit != m.quotas[bestPolicy] { // a fallback's share, say: say what is enforced
		policy = PolicyField(best.Policy, best.Limit, best.Window)
	}
	limitcore.WriteStatus(h, m.opts.Headers, now, best, policy)
}

// status returns the Status of the i-th applied policy of o.
func (m *Middleware) status(o *engine.Outcome, i int) Status {
	r := &o.Results[i]
	s := m.statuses[o.Policies[i]]
	s.Limit, s.Remaining, s.Reset = r.Limit, r.Remaining, r.Reset
	s.Allowed, s.RetryAfter = r.Allowed, r.RetryAfter
	return s
}

// deny answers a denied request: headers, Retry-After, then the denied
// handler or the problem body.
func (m *Middleware) deny(w http.ResponseWriter, r *http.Request, o *engine.Outcome) {
	h := w.Header()
	m.writeHeaders(h, o)
	RetryAfter(h, o.RetryAfter)
	d := m.denial(o)
	if m.opts.DeniedHandler != nil {
		m.opts.DeniedHandler.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), denialKey{}, d)))
		return
	}
	WriteProblem(w, QuotaExceeded(d.RetryAfter, d.Policies...))
}

// Denial describes a denied request to a custom DeniedHandler.
type Denial struct {
	// Policies names the policies that denied the request.
	Policies []string
	// RetryAfter is the wait after which the same request would be
	// admitted, as far as the store knows; zero when its cost exceeds what
	// a policy could ever admit.
	RetryAfter time.Duration
	// Statuses are the applied policies' statuses.
	Statuses []Status
}

type denialKey struct{}

// DenialFromContext returns the denial the middleware put in the context
// of the request it passes to Options.DeniedHandler.
func DenialFromContext(ctx context.Context) (*Denial, bool) {
	d, ok := ctx.Value(denialKey{}).(*Denial)
	return d, ok
}

func (m *Middleware) denial(o *engine.Outcome) *Denial {
	d := &Denial{RetryAfter: o.RetryAfter, Statuses: make([]Status, o.N)}
	for i := range o.Results[:o.N] {
		d.Statuses[i] = m.status(o, i)
		if !o.Results[i].Allowed {
			d.Policies = append(d.Policies, d.Statuses[i].Policy)
		}
	}
	return d
}
