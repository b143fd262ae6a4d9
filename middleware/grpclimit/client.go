package grpclimit

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/costwise/batcher/middleware/internal/engine"
)

// ClientOptions configures a ClientInterceptor.
type ClientOptions struct {
	// Policies are the local limits calls are paced by, decided together.
	// A policy whose Key is nil keys by method; KeyConst gives one budget
	// for every call.
	Policies []Policy
	// Store decides the limits, usually limit's in-memory store (or a Redis
	// store shared by every replica calling the same quota-limited API).
	Store Store
	// Cost and Costs work as in Options.
	Cost  CostFunc
	Costs map[string]int64
	// StoreTimeout bounds each decision on a store that is not in memory;
	// zero means DefaultStoreTimeout. If the store fails, calls go out
	// unpaced.
	StoreTimeout time.Duration
	// Wait waits for d or until ctx is done, whichever is first, and
	// returns ctx.Err() in the second case; nil means a timer. Tests use
	// it to move a fake clock instead of sleeping.
	Wait func(ctx context.Context, d time.Duration) error
	// Now tells the time to compare with call deadlines; nil means
	// time.Now.
	Now func() time.Time
}

// ClientInterceptor holds calls back until a local limit admits them:
// instead of sending a call a quota-limited server would refuse, it waits
// the retry delay, within the call's deadline. A call its deadline does not
// leave time for fails at once with codes.ResourceExhausted and a RetryInfo
// detail, as the server would answer; a call whose cost no wait can admit
// fails the same way without RetryInfo. If the store fails, calls go out
// unpaced. It is safe for concurrent use.
type ClientInterceptor struct {
	opts ClientOptions
	eng  *engine.Engine
	keys []KeyFunc
}

// NewClient returns the client interceptor for opts, or a *ConfigError.
func NewClient(opts ClientOptions) (*ClientInterceptor, error) {
	opts.Policies = named(opts.Policies)
	c := &ClientInterceptor{opts: opts}
	if c.opts.Cost == nil {
		c.opts.Cost = CostTable(opts.Costs, 1)
	}
	if c.opts.Now == nil {
		c.opts.Now = time.Now
	}
	if c.opts.Wait == nil {
		c.opts.Wait = waitTimer
	}
	for _, p := range c.opts.Policies {
		key := p.Key
		if key == nil {
			key = KeyMethod
		}
		c.keys = append(c.keys, key)
	}
	eo := engineOptions(c.opts.Policies, opts.Store, MetricsOptions{})
	eo.Timeout, eo.Now = opts.StoreTimeout, c.opts.Now
	var err error
	if c.eng, err = engine.Build(eo); err != nil {
		return nil, err
	}
	return c, nil
}

// waitTimer waits d on a timer, or until ctx is done.
func waitTimer(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Unary returns the unary client interceptor.
func (c *ClientInterceptor) Unary() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if err := c.Acquire(ctx, method); err != nil {
			return err
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// Stream returns the stream client interceptor; a stream is paced once,
// when it opens.
func (c *ClientInterceptor) Stream() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if err := c.Acquire(ctx, method); err != nil {
			return nil, err
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
}

// Acquire waits until the local limits admit a call of method, spending
// its cost, and returns nil; or returns the status error the call fails
// with: ResourceExhausted when the wait would pass ctx's deadline or no
// wait can admit the cost, and the context's status when ctx ends first.
func (c *ClientInterceptor) Acquire(ctx context.Context, method string) error {
	var keys [engine.MaxPolicies]string
	n := len(c.keys)
	for i, k := range c.keys {
		keys[i] = k(ctx, method)
	}
	cost := c.opts.Cost(ctx, method)
	if cost < 0 {
		cost = 0
	}
	o := engine.GetOutcome()
	defer engine.PutOutcome(o)
	for {
		*o = engine.Outcome{}
		c.eng.Decide(ctx, keys[:n], cost, o)
		if o.Action != engine.Deny {
			return nil
		}
		names := c.denied(o)
		if o.RetryAfter <= 0 {
			return ExhaustedStatus(0, names...).Err()
		}
		if dl, ok := ctx.Deadline(); ok && c.opts.Now().Add(o.RetryAfter).After(dl) {
			return ExhaustedStatus(o.RetryAfter, names...).Err()
		}
		if err := c.opts.Wait(ctx, o.RetryAfter); err != nil {
			return status.FromContextError(err).Err()
		}
	}
}

func (c *ClientInterceptor) denied(o *engine.Outcome) []string {
	names := c.eng.Names()
	var out []string
	for i := range o.Results[:o.N] {
		if !o.Results[i].Allowed {
			out = append(out, names[o.Policies[i]])
		}
	}
	return out
}
