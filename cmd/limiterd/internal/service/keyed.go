package service

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/limit"
)

// keyedStore is a limit.Store behind the configured failure policy.
type keyedStore struct {
	store  limit.Store
	policy limit.Policy
	scale  int64 // store units per token
	window time.Duration
	ping   func(context.Context) error
	stop   func()
}

// policyOf turns the configuration's algorithm and parameters into a
// policy counted in 1/scale tokens. The rolling window counts whole tokens
// (its log holds one entry per distinct instant, its limit at most 2^20);
// the others count thousandths.
func policyOf(cfg Config) (limit.Policy, int64, error) {
	a := cfg.AlgoSettings
	field := func(name string, err error) error {
		return &ConfigError{File: cfg.file, Field: "algo_settings." + name, Reason: err.Error()}
	}
	var p limit.Policy
	scale := int64(tokenScale)
	switch cfg.UseAlgo {
	case "token_bucket", "gcra":
		rate, err := limit.RateFromFloat(*a.Rate)
		if err != nil {
			return p, 0, field("rate", err)
		}
		p = limit.TokenBucket(1, rate)
		if cfg.UseAlgo == "gcra" {
			p = limit.GCRA(rate, 1)
		}
		if p, err = p.Scale(scale); err != nil {
			return p, 0, field("rate", err)
		}
		p.Limit = int64(math.Round(*a.Capacity * float64(scale)))
		if p.Limit <= 0 {
			return p, 0, field("capacity", errors.New("must be at least 0.001"))
		}
	default:
		if cfg.UseAlgo == "rolling_window" {
			scale = 1
		}
		window := time.Duration(*a.WindowSize) * time.Second
		max := *a.MaxRequests * scale
		switch cfg.UseAlgo {
		case "fixed_window":
			p = limit.FixedWindow(max, window)
		case "rolling_window":
			p = limit.RollingWindow(max, window)
		default:
			p = limit.SlidingWindow(max, window)
		}
	}
	p = p.Named(cfg.UseAlgo)
	if err := p.Validate(); err != nil {
		var pe *limit.PolicyError
		if errors.As(err, &pe) {
			return p, 0, field(pe.Field, errors.New(pe.Reason))
		}
		return p, 0, field(cfg.UseAlgo, err)
	}
	return p, scale, nil
}

// storeTimeout bounds every call to the store, on every API: past it the
// call is a store failure, decided by on_store_failure.
const storeTimeout = time.Second

// failureModes maps on_store_failure's values; local_fallback is the former
// name of fallback.
var failureModes = map[string]limit.FailureMode{
	"fail_open": limit.FailOpen, "fail_closed": limit.FailClosed,
	"fallback": limit.FailFallback, "local_fallback": limit.FailFallback,
}

// validFailureMode reports whether s is a value of on_store_failure.
func validFailureMode(s string) bool {
	_, ok := failureModes[s]
	return ok
}

// failureMode maps on_store_failure.
func failureMode(s string) limit.FailureMode { return failureModes[s] }

// newKeyed builds the store of POST /limit and ratelimiter.v1.
func newKeyed(cfg Config, rdb redis.UniversalClient, m *metrics) (keyedLimiter, error) {
	p, scale, err := policyOf(cfg)
	if err != nil {
		return nil, err
	}
	k := &keyedStore{policy: p, scale: scale, ping: func(context.Context) error { return nil }, stop: func() {}}
	if p.Algorithm != limit.TokenBucketAlgorithm && p.Algorithm != limit.GCRAAlgorithm {
		k.window = p.Window
	}
	var base limit.Store
	if rdb != nil {
		rs, err := newRedisLimitStore(rdb, cfg)
		if err != nil {
			return nil, err
		}
		base, k.stop = rs, func() { closeRedisLimitStore(rs) }
		if cfg.Backends.Redis.LocalAllowance {
			m.allowances("keyed", keyedAllowanceCounts(rs, scale))
		}
		k.ping = (&sharedPing{ping: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }}).Ping
	} else {
		mem, err := k.memory(cfg, m, "keyed")
		if err != nil {
			return nil, err
		}
		base = mem
	}
	var fallback limit.Store
	if rdb != nil && failureMode(cfg.OnStoreFailure) == limit.FailFallback {
		// The local fallback is a memory store too: bounded by max_keys.
		if fallback, err = k.memory(cfg, m, "keyed_fallback"); err != nil {
			k.stop()
			return nil, err
		}
	}
	k.store, err = limit.WithFailurePolicy(base, limit.FailureOptions{
		Mode:      failureMode(cfg.OnStoreFailure),
		Fallback:  fallback,
		Replicas:  cfg.Replicas,
		Timeout:   storeTimeout,
		OnFailure: func(error) { m.storeErrors.WithLabelValues("store").Inc() },
	})
	if err != nil {
		k.stop()
		return nil, err
	}
	return k, nil
}

// memory makes a memory store of cfg's shards and max_keys, cleaned every
// eviction_time until k closes, its keys and lossy evictions published as
// limiterd_memory_keys{store=name} and limiterd_memory_evictions_total.
func (k *keyedStore) memory(cfg Config, m *metrics, name string) (*limit.Memory, error) {
	mem, err := limit.NewMemory(limit.MemoryOptions{
		Shards:  int(cfg.Backends.InMemory.ShardsCount),
		MaxKeys: int(cfg.Backends.InMemory.MaxKeys),
	})
	if err != nil {
		return nil, &ConfigError{File: cfg.file, Field: "backends.in_memory", Reason: err.Error()}
	}
	stop, prev := cleanupLoop(mem, time.Duration(cfg.Backends.InMemory.EvictionTime)*time.Second), k.stop
	k.stop = func() { stop(); prev() }
	m.memoryKeys(name, func() float64 { return float64(mem.Stats().Keys) })
	m.memoryEvictions(name, func() float64 { return float64(mem.Stats().Evicted) })
	return mem, nil
}

// cleanupLoop drops the memory store's keys at rest every interval, until
// the returned function is called.
func cleanupLoop(mem *limit.Memory, every time.Duration) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				mem.Cleanup()
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-exited }) }
}

// Allow implements keyedLimiter.
func (k *keyedStore) Allow(ctx context.Context, key string, milli int64) (verdict, error) {
	cost := milli
	if k.scale != tokenScale {
		cost = (milli*k.scale + tokenScale - 1) / tokenScale
	}
	d, err := k.store.AllowN(ctx, key, k.policy, cost)
	if err != nil {
		return verdict{}, err
	}
	v := verdict{
		Allowed:    d.Allowed,
		Limit:      d.Limit * tokenScale / k.scale,
		Remaining:  d.Remaining * tokenScale / k.scale,
		RetryAfter: d.RetryAfter,
		ResetAfter: d.ResetAfter,
		Window:     k.window,
		Result:     "allowed",
	}
	switch {
	case d.Reason == limit.ReasonFailOpen:
		v.Result = "failed_open"
	case d.Reason == limit.ReasonFailClosed:
		v.Result, v.Unavailable = "failed_closed", true
	case d.Reason == limit.ReasonFallback && d.Allowed:
		v.Result = "fallback_allowed"
	case d.Reason == limit.ReasonFallback:
		v.Result = "fallback_denied"
	case !d.Allowed:
		v.Result = "denied"
	}
	return v, nil
}

// Ping implements keyedLimiter.
func (k *keyedStore) Ping(ctx context.Context) error { return k.ping(ctx) }

// Close implements keyedLimiter.
func (k *keyedStore) Close() error {
	k.stop()
	return nil
}
