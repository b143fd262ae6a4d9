// Package lease is the storage seam of a shared resource: the Manager
// interface that keeps partitions, exclusive expiring leases on them and the
// demand each instance publishes, the Snapshot it reads in one round trip,
// and the errors every implementation returns. The algorithm that decides
// what to lease is in package sharing; the stores are sharing's
// MemoryLeaseManager, package azureblob and package redislease, and package
// leasetest checks that each one keeps the contract.
package lease

import (
	"context"
	"time"
)

// MaxPartitions is the largest number of partitions a shared resource
// supports; its Provision returns an error past it.
const MaxPartitions = 500

// Manager is the storage seam of a shared resource: it keeps the
// partitions of a shared capacity, the exclusive expiring leases on them, and
// the demand each instance publishes. The algorithm that decides what to
// lease lives in package sharing; a Manager only stores. Implementations in this
// module: sharing.NewMemoryLeaseManager (in process), package azureblob
// (Azure Blob Storage) and package redislease (Redis).
//
// Owners are strings that are unique per instance (sharing.Resource uses a
// random UUID, which Azure requires as a lease id). Every method may be
// called concurrently. Each call is one storage transaction or round trip,
// except Provision.
type Manager interface {
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
	Snapshot(ctx context.Context, count int) (Snapshot, error)

	// Acquire takes an exclusive lease on partition for owner, lasting d
	// from when the store handles the request. It returns a
	// ConflictError when another owner holds a lease on it, and a
	// PartitionMissingError when the partition does not exist.
	Acquire(ctx context.Context, partition int, owner string, d time.Duration) error

	// Renew extends owner's lease on partition to d from now. It returns a
	// ConflictError when owner does not hold the lease (it expired and
	// another owner took it, or it was never held) and never extends another
	// owner's lease.
	Renew(ctx context.Context, partition int, owner string, d time.Duration) error

	// Release ends owner's lease on partition at once. It never ends another
	// owner's lease: when owner does not hold it, it returns a
	// ConflictError and changes nothing.
	Release(ctx context.Context, partition int, owner string) error

	// PublishDemand records that owner wants partitions partitions, a record
	// that lapses after ttl unless published again. Zero withdraws the record.
	PublishDemand(ctx context.Context, owner string, partitions uint32, ttl time.Duration) error
}

// BatchRenewer is implemented by a Manager that can renew several leases
// of one owner in one storage transaction. sharing.Resource uses it, when
// the Manager has it, to renew all the leases due at once in one call, so
// that an instance's storage calls do not grow with the partitions it
// holds. Redis and the in-process memory store have it; Azure Blob Storage
// has no batch lease operation, so there each renewal is a call of its own.
type BatchRenewer interface {
	// RenewBatch does what Renew does for each of partitions, in one round
	// trip. It returns one result per partition, in the same order: nil, a
	// ConflictError or a PartitionMissingError, as Renew would. err is
	// non-nil when the call itself failed; then results is nil and no
	// lease is known to be renewed.
	RenewBatch(ctx context.Context, partitions []int, owner string, d time.Duration) (results []error, err error)
}

// BatchAcquirer is implemented by a Manager that can acquire several
// leases for one owner in one storage transaction. sharing.Resource uses it,
// when the Manager has it, to take all the partitions a pass wants in one
// call. Azure's lease table (azureblob.TableLeaseManager) has it.
type BatchAcquirer interface {
	// AcquireBatch does what Acquire does for each of partitions, in one
	// transaction. It returns one result per partition, in the same order:
	// nil, a ConflictError or a PartitionMissingError, as Acquire would. err
	// is non-nil when the call itself failed; then results is nil and a
	// lease may or may not have been granted.
	AcquireBatch(ctx context.Context, partitions []int, owner string, d time.Duration) (results []error, err error)
}

// BatchReleaser is implemented by a Manager that can release several leases
// of one owner in one storage transaction. sharing.Resource uses it, when
// the Manager has it, to give back all the partitions a pass releases in one
// call.
type BatchReleaser interface {
	// ReleaseBatch does what Release does for each of partitions, in one
	// transaction. It returns one result per partition, in the same order:
	// nil, a ConflictError or a PartitionMissingError, as Release would. err
	// is non-nil when the call itself failed; then results is nil and the
	// leases are left to expire.
	ReleaseBatch(ctx context.Context, partitions []int, owner string) (results []error, err error)
}

// PartitionState is the state of one partition in a Snapshot.
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

// Snapshot is what a Manager reads in one round trip.
type Snapshot struct {
	// Partitions holds the state of partitions 0..count-1.
	Partitions []PartitionState
	// Demands maps each owner with a live demand record to the number of
	// partitions it wants. Owners whose record lapsed are absent.
	Demands map[string]uint32
}
