package batcher

import "context"

// RateLimiter supplies capacity, in cost per second, to a Batcher. Call
// Provision, then Start; the Batcher calls GiveMe with its target every
// capacity interval and reads Capacity whenever it considers a release.
// Implementations must be safe for concurrent use.
type RateLimiter interface {
	// Provision prepares whatever the limiter needs (storage, partitions).
	Provision(ctx context.Context) error
	// MaxCapacity is the most capacity the limiter could ever supply.
	MaxCapacity() uint32
	// Capacity is the capacity the limiter holds now.
	Capacity() uint32
	// GiveMe tells the limiter how much capacity is wanted.
	GiveMe(target uint32)
	// Start begins whatever background work the limiter does.
	Start(ctx context.Context) error
	// Stop ends the limiter's background work and gives back what it holds.
	Stop()
}
