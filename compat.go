package batcher

import (
	"github.com/costwise/batcher/azureblob"
	"github.com/costwise/batcher/internal/errs"
	"github.com/costwise/batcher/internal/events"
	"github.com/costwise/batcher/lease"
	"github.com/costwise/batcher/sharing"
)

// This file holds the names of go-batcher v1.8.0, and of earlier versions
// of this module, whose definitions moved to the packages below this one:
// lease (the storage seam), sharing (the sharing algorithm and the
// in-memory store), azureblob (Azure Blob Storage), and the module's
// internal error and event types; redislease is the Redis store. They keep
// old code compiling unchanged. Each type is an alias, so values, methods
// and errors.As are those of the package that defines it, and each
// constructor only calls the package's own.

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

// Error types that the rate limiters below this package return, under their
// go-batcher v1.8.0 names. Each is an alias, so errors.As matches whether the
// caller names it here or in the package that defines it.
type (
	// RateLimiterImproperOrderError is returned by a rate limiter whose
	// methods were called out of order: Start before Provision, or either
	// after Stop.
	RateLimiterImproperOrderError = errs.RateLimiterImproperOrderError
	// InvalidSettingError is returned by Start (Batcher) or Provision (a
	// shared resource) when a With method was given a value it cannot use,
	// such as a non-positive interval.
	InvalidSettingError = errs.InvalidSettingError
	// PartitionsOutOfRangeError is returned by Provision when the shared
	// capacity divided by the factor (rounded up) gives more partitions than
	// a shared resource supports (MaxPartitions).
	PartitionsOutOfRangeError = sharing.PartitionsOutOfRangeError
	// UndefinedLeaseManagerError is returned by a shared resource that has
	// no LeaseManager to hold its partitions in.
	UndefinedLeaseManagerError = sharing.UndefinedLeaseManagerError
	// UndefinedSharedCapacityError is returned by Provision when the shared
	// capacity is zero.
	UndefinedSharedCapacityError = sharing.UndefinedSharedCapacityError
	// LeaseConflictError is returned by a LeaseManager when a lease
	// operation found the partition leased by another owner, or not leased
	// by the caller.
	LeaseConflictError = lease.ConflictError
	// PartitionMissingError is returned by a LeaseManager when the partition
	// (or its container) does not exist in the store.
	PartitionMissingError = lease.PartitionMissingError
	// LeaseDurationError is returned when a lease duration is outside what
	// the store grants: Azure Blob Storage takes 15 to 60 seconds.
	LeaseDurationError = lease.DurationError
	// AzureCredentialError is returned by the Azure lease manager (and so by
	// AzureSharedResource.Provision) when no credential was configured.
	AzureCredentialError = azureblob.CredentialError
	// AzureConfigError is returned by the Azure lease manager when its
	// configuration cannot address a container.
	AzureConfigError = azureblob.ConfigError
	// ListenerPanicError is the metadata of the error event raised, to the
	// other listeners, when a listener panicked; the panic is recovered and
	// the listener stays registered.
	ListenerPanicError = events.ListenerPanicError
)
