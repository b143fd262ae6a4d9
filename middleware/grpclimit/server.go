package grpclimit

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/middleware/internal/engine"
	"github.com/costwise/batcher/middleware/limitcore"
)

// Default values of Options.
const (
	DefaultStoreTimeout         = limitcore.DefaultStoreTimeout
	DefaultFailClosedRetryAfter = limitcore.DefaultFailClosedRetryAfter
	DefaultNamespace            = limitcore.DefaultNamespace
	DefaultSubsystem            = "grpc_limit"
)

// Options configures a server Interceptor. Policies and Store are
// required; every other field has a working default.
type Options struct {
	// Policies are decided together for every call, all or nothing, as in
	// httplimit. At most 8. A policy whose Key is nil keys by peer address.
	Policies []Policy
	// Store decides the limits: limit's in-memory or Redis store.
	Store Store
	// Cost is what a call spends; nil means Costs, or 1 per call when
	// Costs is nil too. Negative costs count as 0.
	Cost CostFunc
	// Costs is a per-method cost table ("/pkg.Service/Method" or
	// "/pkg.Service/" for a whole service); methods not in it cost 1.
	Costs map[string]int64
	// Headers is the format of the rate-limit metadata; the default is the
	// IETF draft's ratelimit-policy and ratelimit entries.
	Headers HeaderFormat
	// OnStoreError, Fallback, FallbackReplicas, StoreTimeout,
	// FailClosedRetryAfter and OnStoreFailure work as in httplimit.Options;
	// a fail-closed refusal is codes.Unavailable with a RetryInfo.
	OnStoreError         FailMode
	Fallback             Store
	FallbackReplicas     int
	StoreTimeout         time.Duration
	FailClosedRetryAfter time.Duration
	OnStoreFailure       func(error)
	// Shadow decides, counts and sends metadata but never refuses a call.
	Shadow bool
	// AllowCIDRs are peer networks that are never limited; AllowKeys are
	// keys that are never limited.
	AllowCIDRs []netip.Prefix
	AllowKeys  []string
	// MetricsProvider receives the metrics (batcher_grpc_limit_*); nil
	// records none. promlimit.New(reg) records them on a Prometheus
	// registry.
	MetricsProvider MetricsProvider
	// Metrics names the metrics.
	Metrics MetricsOptions
	// Registerer is a prometheus.Registerer to record the metrics on, as
	// MetricsProvider: promlimit.New(Registerer) does. It works only in a
	// program that links package promlimit in; New returns a *ConfigError
	// otherwise, and when MetricsProvider is set too.
	//
	// Deprecated: set MetricsProvider to promlimit.New(reg), which keeps
	// Prometheus out of programs that do not use it.
	Registerer any
	// Now is the clock of the reset metadata and the latency histogram;
	// nil means time.Now.
	Now func() time.Time
}

// Interceptor limits calls on a gRPC server. It is safe for concurrent use.
type Interceptor struct {
	opts     Options
	eng      *engine.Engine
	keys     []KeyFunc
	statuses []limitcore.Status
	allowKey map[string]struct{}
}

// New returns the interceptor for opts, or a *ConfigError naming the bad
// field.
func New(opts Options) (*Interceptor, error) {
	opts.Policies = named(opts.Policies)
	it := &Interceptor{opts: opts}
	if it.opts.Now == nil {
		it.opts.Now = time.Now
	}
	if it.opts.Cost == nil {
		it.opts.Cost = CostTable(opts.Costs, 1)
	}
	it.setPolicies()
	if len(opts.AllowKeys) > 0 {
		it.allowKey = make(map[string]struct{}, len(opts.AllowKeys))
		for _, k := range opts.AllowKeys {
			it.allowKey[k] = struct{}{}
		}
	}
	var err error
	if it.eng, err = it.build(); err != nil {
		return nil, err
	}
	return it, nil
}

// setPolicies keeps the policies' keys and the constant part of their
// statuses; build checks them.
func (it *Interceptor) setPolicies() {
	for _, p := range it.opts.Policies {
		key := p.Key
		if key == nil {
			key = KeyPeer(nil)
		}
		it.keys = append(it.keys, key)
		it.statuses = append(it.statuses, limitcore.Status{Policy: p.Name, Window: engine.Window(p.Limit)})
	}
}

func (it *Interceptor) build() (*engine.Engine, error) {
	o := &it.opts
	eo := engineOptions(o.Policies, o.Store, o.Metrics)
	eo.Mode, eo.Fallback, eo.Replicas, eo.Timeout = o.OnStoreError, o.Fallback, o.FallbackReplicas, o.StoreTimeout
	eo.FailRetry, eo.Shadow, eo.OnFailure, eo.Now = o.FailClosedRetryAfter, o.Shadow, o.OnStoreFailure, o.Now
	eo.MetricsProvider, eo.Registerer = o.MetricsProvider, o.Registerer
	return engine.Build(eo)
}

// engineOptions returns the engine options of a server or client
// interceptor deciding ps on store, its metrics named by mo.
func engineOptions(ps []Policy, store Store, mo MetricsOptions) engine.Options {
	names := make([]string, len(ps))
	limits := make([]limit.Policy, len(ps))
	for i, p := range ps {
		names[i], limits[i] = p.Name, p.Limit
	}
	if mo.Namespace == "" {
		mo.Namespace = DefaultNamespace
	}
	if mo.Subsystem == "" {
		mo.Subsystem = DefaultSubsystem
	}
	return engine.Options{Package: "grpclimit", Names: names, Limits: limits, Store: store,
		DefaultTimeout: DefaultStoreTimeout, MetricsNames: mo}
}

// Unary returns the unary server interceptor.
func (it *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, err := it.check(ctx, info.FullMethod)
		if md != nil {
			_ = grpc.SetHeader(ctx, md)
		}
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// Stream returns the stream server interceptor; a stream is decided once,
// when it opens, at the cost of its method.
func (it *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, err := it.check(ss.Context(), info.FullMethod)
		if md != nil {
			_ = ss.SetHeader(md)
		}
		if err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// check decides a call: it returns the metadata to send and, for a call
// that must not run, its status error.
func (it *Interceptor) check(ctx context.Context, method string) (metadata.MD, error) {
	var keys [engine.MaxPolicies]string
	n := len(it.keys)
	for i, k := range it.keys {
		keys[i] = k(ctx, method)
	}
	if it.allowListed(ctx, keys[:n]) {
		return nil, nil
	}
	cost := it.opts.Cost(ctx, method)
	if cost < 0 {
		cost = 0
	}
	o := engine.GetOutcome()
	defer engine.PutOutcome(o)
	it.eng.Decide(ctx, keys[:n], cost, o)
	h := http.Header{}
	switch o.Action {
	case engine.FailDenied:
		limitcore.RetryAfter(h, o.RetryAfter)
		return headerMD(h), UnavailableStatus(o.RetryAfter).Err()
	case engine.Deny:
		st := it.write(h, o)
		limitcore.RetryAfter(h, o.RetryAfter)
		return headerMD(h), ExhaustedStatus(o.RetryAfter, violated(st)...).Err()
	}
	if o.N == 0 {
		return nil, nil
	}
	it.write(h, o)
	return headerMD(h), nil
}

// write writes the rate-limit fields of o into h and returns the statuses.
func (it *Interceptor) write(h http.Header, o *engine.Outcome) []limitcore.Status {
	st := make([]limitcore.Status, o.N)
	for i := range o.Results[:o.N] {
		r := &o.Results[i]
		s := it.statuses[o.Policies[i]]
		s.Limit, s.Remaining, s.Reset, s.Allowed, s.RetryAfter = r.Limit, r.Remaining, r.Reset, r.Allowed, r.RetryAfter
		st[i] = s
	}
	limitcore.WriteHeaders(h, it.opts.Headers, it.opts.Now(), st...)
	return st
}

func violated(st []limitcore.Status) []string {
	var out []string
	for _, s := range st {
		if !s.Allowed {
			out = append(out, s.Policy)
		}
	}
	return out
}

func (it *Interceptor) allowListed(ctx context.Context, keys []string) bool {
	if it.allowKey != nil {
		for _, k := range keys {
			if _, ok := it.allowKey[k]; ok && k != "" {
				return true
			}
		}
	}
	if len(it.opts.AllowCIDRs) == 0 {
		return false
	}
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return false
	}
	tcp, ok := p.Addr.(*net.TCPAddr)
	if !ok {
		return false
	}
	a, ok := netip.AddrFromSlice(tcp.IP)
	if !ok {
		return false
	}
	a = a.Unmap()
	for _, pr := range it.opts.AllowCIDRs {
		if pr.Contains(a) {
			return true
		}
	}
	return false
}
