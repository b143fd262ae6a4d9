package main

import (
	"errors"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/redislease"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// sharedLimiter is what a replica needs of its shared resource: the
// RateLimiter its batcher uses, its events and its statistics.
// *batcher.SharedResource and *batcher.AzureSharedResource both satisfy it.
type sharedLimiter interface {
	batcher.RateLimiter
	Stats() batcher.SharedStats
	AddListener(fn func(event string, val int, msg string, metadata interface{})) uuid.UUID
}

// limiters makes the shared resources of the replicas of one run, all over
// the same coordination store, so that they share its capacity as pods
// would.
type limiters struct {
	cfg   config
	mem   *batcher.MemoryLeaseManager // --store=memory: one for every replica
	redis *redis.Client               // --store=redis
}

// newLimiters prepares the coordination store named by cfg.store.
func newLimiters(cfg config) (*limiters, error) {
	l := &limiters{cfg: cfg}
	switch cfg.store {
	case "memory":
		l.mem = batcher.NewMemoryLeaseManager()
	case "redis":
		l.redis = redis.NewClient(&redis.Options{Addr: cfg.redisAddr})
	case "azure":
		if cfg.azureConnString == "" && cfg.azureAccount == "" {
			return nil, errors.New("--store=azure needs --azure-connection-string or --azure-account")
		}
	}
	return l, nil
}

// make returns a new replica's shared resource: the budget less every
// replica's reservation is shared in partitions of cfg.factor.
func (l *limiters) make() (sharedLimiter, error) {
	c := l.cfg
	switch c.store {
	case "memory":
		// shown in the report: begin
		return batcher.NewSharedResource(l.mem, c.shared()).WithMaxInterval(c.leaseInterval()).
			WithFactor(c.factor).WithReservedCapacity(c.reserve()), nil
		// shown in the report: end
	case "redis":
		return redislease.NewSharedResource(l.redis, c.redisPrefix, c.shared()).WithMaxInterval(c.leaseInterval()).
			WithFactor(c.factor).WithReservedCapacity(c.reserve()), nil
	}
	return l.makeAzure()
}

// makeAzure builds an AzureSharedResource with the credential the flags
// give: a connection string or an account key. (A service would rather sign
// in with Microsoft Entra ID: WithCredential takes any
// azcore.TokenCredential, such as azidentity's DefaultAzureCredential; the
// sample leaves azidentity out so that this module does not require it.)
func (l *limiters) makeAzure() (sharedLimiter, error) {
	c := l.cfg
	r := batcher.NewAzureSharedResource(c.azureAccount, c.azureContainer, c.shared()).
		WithFactor(c.factor).WithReservedCapacity(c.reserve())
	r.WithMaxInterval(c.leaseInterval())
	if c.azureServiceURL != "" {
		r.WithServiceURL(c.azureServiceURL)
	}
	switch {
	case c.azureConnString != "":
		r.WithConnectionString(c.azureConnString)
	case c.azureKey != "":
		r.WithMasterKey(c.azureKey)
	default:
		return nil, errors.New("no --azure-key or --azure-connection-string")
	}
	return r, nil
}

// describe names the store for the logs.
func (l *limiters) describe() string {
	c := l.cfg
	switch c.store {
	case "redis":
		return "redis " + c.redisAddr + " prefix " + c.redisPrefix
	case "azure":
		if c.azureServiceURL != "" {
			return "azure " + c.azureServiceURL + " container " + c.azureContainer
		}
		if c.azureAccount != "" {
			return "azure account " + c.azureAccount + " container " + c.azureContainer
		}
		return "azure (connection string) container " + c.azureContainer
	}
	return "memory (in process)"
}

// close releases the store's connections; call it after every resource
// was stopped.
func (l *limiters) close() {
	if l.redis != nil {
		_ = l.redis.Close()
	}
}
