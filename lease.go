package batcher

import (
	"context"
	"time"
)

// MaxPartitions is the largest number of partitions a shared resource
// supports; Provision returns PartitionsOutOfRangeError past it.
const MaxPartitions = 500

// LeaseManager is the storage seam of a shared resource: it keeps the
// partitions of a shared capacity, the exclusive expiring leases on them, and
// the demand each instance publishes. The algorithm that decides what to
// lease lives in SharedResource; a LeaseManager only stores. Implementations
// in this module: NewMemoryLeaseManager (in process), the Azure Blob Storage
// one behind AzureSharedResource, and the Redis one in package redislease.
//
// Owners are strings that are unique per instance (SharedResource uses a
// random UUID, which Azure requires as a lease id). Every method may be
// called concurrently. Each call is one storage transaction or round trip,
// except Provision.
type LeaseManager interface {
	// Provision makes sure partitions 0..count-1 exist, creating what is
	// missing (its container too) so that concurrent calls from many
	// instances are safe. It calls report, when not nil, for each thing it
	// verified or created, with CreatedContainerEvent or
	// VerifiedContainerEvent (msg: the container's address) and
	// CreatedBlobEvent or VerifiedBlobEvent (val: the partition index).
	Provision(ctx context.Context, count int, report func(event string, val int, msg string)) error

	// Snapshot reads, in one round trip, the state of partitions
	// 0..count-1 and the demand that every instance with a live record has
	// published.
	Snapshot(ctx context.Context, count int) (LeaseSnapshot, error)

	// Acquire takes an exclusive lease on partition for owner, lasting d
	// from when the store handles the request. It returns a
	// LeaseConflictError when another owner holds a lease on it, and a
	// PartitionMissingError when the partition does not exist.
	Acquire(ctx context.Context, partition int, owner string, d time.Duration) error

	// Renew extends owner's lease on partition to d from now. It returns a
	// LeaseConflictError when owner does not hold the lease (it expired and
	// another owner took it, or it was never held) and never extends another
	// owner's lease.
	Renew(ctx context.Context, partition int, owner string, d time.Duration) error

	// Release ends owner's lease on partition at once. It never ends another
	// owner's lease: when owner does not hold it, it returns a
	// LeaseConflictError and changes nothing.
	Release(ctx context.Context, partition int, owner string) error

	// PublishDemand records that owner wants partitions partitions, a record
	// that lapses after ttl unless published again. Zero withdraws the record.
	PublishDemand(ctx context.Context, owner string, partitions uint32, ttl time.Duration) error
}

// PartitionState is the state of one partition in a LeaseSnapshot.
type PartitionState uint8

const (
	// PartitionMissing means the partition does not exist in the store (it
	// was never provisioned, or the store lost it).
	PartitionMissing PartitionState = iota
	// PartitionFree means nobody holds a lease on the partition.
	PartitionFree
	// PartitionLeased means some owner holds an unexpired lease on it.
	PartitionLeased
)

// LeaseSnapshot is what a LeaseManager reads in one round trip.
type LeaseSnapshot struct {
	// Partitions holds the state of partitions 0..count-1.
	Partitions []PartitionState
	// Demands maps each owner with a live demand record to the number of
	// partitions it wants. Owners whose record lapsed are absent.
	Demands map[string]uint32
}
