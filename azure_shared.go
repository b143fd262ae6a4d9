package batcher

import (
	"github.com/costwise/batcher/azureblob"
	"github.com/costwise/batcher/lease"
	"github.com/costwise/batcher/sharing"
)

// The shared resources and their lease managers live in packages of their
// own: lease (the storage seam), sharing (the sharing algorithm and the
// in-memory store) and azureblob (Azure Blob Storage); redislease is the
// Redis store. The names below keep go-batcher v1.8.0's API, and that of
// earlier versions of this module, compiling unchanged: each type is an
// alias, so values, methods and errors.As are those of the package that
// defines it.

// LeaseManager is the storage seam of a shared resource; see lease.Manager.
type LeaseManager = lease.Manager

// LeaseSnapshot is what a LeaseManager reads in one round trip; see
// lease.Snapshot.
type LeaseSnapshot = lease.Snapshot

// PartitionState is the state of one partition in a LeaseSnapshot.
type PartitionState = lease.PartitionState

// The states of a partition in a LeaseSnapshot.
const (
	// PartitionMissing means the partition does not exist in the store.
	PartitionMissing = lease.PartitionMissing
	// PartitionFree means nobody holds a lease on the partition.
	PartitionFree = lease.PartitionFree
	// PartitionLeased means some owner holds an unexpired lease on it.
	PartitionLeased = lease.PartitionLeased
)

// MaxPartitions is the largest number of partitions a shared resource
// supports; Provision returns PartitionsOutOfRangeError past it.
const MaxPartitions = lease.MaxPartitions

// SharedResource is a RateLimiter that shares a capacity among instances
// through leases on partitions kept by a LeaseManager; see sharing.Resource
// for the algorithm.
type SharedResource = sharing.Resource

// SharedStats is a snapshot of a SharedResource's state and counters.
type SharedStats = sharing.Stats

// NewSharedResource returns a SharedResource that shares sharedCapacity
// through mgr; see sharing.New for its defaults.
func NewSharedResource(mgr LeaseManager, sharedCapacity uint32) *SharedResource {
	return sharing.New(mgr, sharedCapacity)
}

// Defaults of a SharedResource.
const (
	// DefaultLeaseDuration is the lease length a SharedResource asks for.
	DefaultLeaseDuration = sharing.DefaultLeaseDuration
	// DefaultMaxInterval is the default WithMaxInterval, in milliseconds.
	DefaultMaxInterval = sharing.DefaultMaxInterval
)

// MemoryLeaseManager is a LeaseManager in process memory; see
// sharing.MemoryLeaseManager.
type MemoryLeaseManager = sharing.MemoryLeaseManager

// NewMemoryLeaseManager returns an empty in-process LeaseManager that uses
// the system clock.
func NewMemoryLeaseManager() *MemoryLeaseManager { return sharing.NewMemoryLeaseManager() }

// AzureSharedResource is a RateLimiter that shares a capacity through leases
// on blobs in an Azure Blob Storage container; see azureblob.SharedResource.
type AzureSharedResource = azureblob.SharedResource

// NewAzureSharedResource returns a shared resource for sharedCapacity kept in
// container containerName of storage account accountName; see
// azureblob.NewSharedResource. It needs a credential before Provision.
func NewAzureSharedResource(accountName, containerName string, sharedCapacity uint32) *AzureSharedResource {
	return azureblob.NewSharedResource(accountName, containerName, sharedCapacity)
}

// AzureLeaseManager is a LeaseManager over an Azure Blob Storage container;
// see azureblob.LeaseManager.
type AzureLeaseManager = azureblob.LeaseManager

// NewAzureLeaseManager returns a LeaseManager for container containerName of
// storage account accountName; see azureblob.NewLeaseManager.
func NewAzureLeaseManager(accountName, containerName string) *AzureLeaseManager {
	return azureblob.NewLeaseManager(accountName, containerName)
}

// The lease durations Azure Blob Storage grants.
const (
	// AzureMinLeaseDuration is the shortest lease Azure Blob Storage grants.
	AzureMinLeaseDuration = azureblob.MinLeaseDuration
	// AzureMaxLeaseDuration is the longest fixed lease Azure Blob Storage
	// grants.
	AzureMaxLeaseDuration = azureblob.MaxLeaseDuration
)
