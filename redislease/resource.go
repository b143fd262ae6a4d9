package redislease

import (
	"github.com/costwise/batcher/sharing"
	"github.com/redis/go-redis/v9"
)

// NewSharedResource returns a sharing.Resource that shares
// sharedCapacity with every other instance using the same Redis keyPrefix.
// It is sharing.New(New(client, keyPrefix, opts...),
// sharedCapacity); configure it further with its With* methods.
func NewSharedResource(client redis.UniversalClient, keyPrefix string, sharedCapacity uint32, opts ...Option) *sharing.Resource {
	return sharing.New(New(client, keyPrefix, opts...), sharedCapacity)
}
