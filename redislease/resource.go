package redislease

import (
	"github.com/costwise/batcher"
	"github.com/redis/go-redis/v9"
)

// NewSharedResource returns a batcher.SharedResource that shares
// sharedCapacity with every other instance using the same Redis keyPrefix.
// It is batcher.NewSharedResource(New(client, keyPrefix, opts...),
// sharedCapacity); configure it further with its With* methods.
func NewSharedResource(client redis.UniversalClient, keyPrefix string, sharedCapacity uint32, opts ...Option) *batcher.SharedResource {
	return batcher.NewSharedResource(New(client, keyPrefix, opts...), sharedCapacity)
}
