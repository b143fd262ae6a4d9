package batcher

import (
	"fmt"
	"time"
)

// BatcherImproperOrderError is returned by Start when the batcher was already
// started or has been stopped; a batcher cannot be restarted.
type BatcherImproperOrderError struct{}

func (e BatcherImproperOrderError) Error() string {
	return "batcher: Start was called on a batcher that was already started or stopped"
}

// BufferFullError is returned by Enqueue when the buffer is full and the
// batcher was configured with WithErrorOnFullBuffer.
type BufferFullError struct{}

func (e BufferFullError) Error() string {
	return "batcher: the buffer is full"
}

// BufferNotAllocated is returned when the batcher has no buffer, as with a
// zero-value Batcher that was not made by NewBatcher or NewBatcherWithBuffer,
// or one made with a buffer size of zero.
type BufferNotAllocated struct{}

func (e BufferNotAllocated) Error() string {
	return "batcher: the buffer was not allocated; use NewBatcher or NewBatcherWithBuffer with a size above 0"
}

// NoOperationError is returned by Enqueue when the operation is nil.
type NoOperationError struct{}

func (e NoOperationError) Error() string {
	return "batcher: no operation was provided"
}

// NoWatcherError is returned by Enqueue when the operation has no watcher.
type NoWatcherError struct{}

func (e NoWatcherError) Error() string {
	return "batcher: the operation has no watcher"
}

// PartitionsOutOfRangeError is returned by Provision when the shared capacity
// divided by the factor (rounded up) gives more partitions than a shared
// resource supports (MaxPartitions).
type PartitionsOutOfRangeError struct {
	MaxCapacity    uint32
	Factor         uint32
	PartitionCount int
}

func (e PartitionsOutOfRangeError) Error() string {
	return fmt.Sprintf("batcher: shared capacity %d with factor %d needs %d partitions, more than the %d allowed",
		e.MaxCapacity, e.Factor, e.PartitionCount, MaxPartitions)
}

// RateLimiterImproperOrderError is returned by a rate limiter whose methods
// were called out of order: Start before Provision, or either after Stop.
type RateLimiterImproperOrderError struct{}

func (e RateLimiterImproperOrderError) Error() string {
	return "batcher: rate limiter methods were called out of order (Provision, then Start, then Stop)"
}

// TooExpensiveError is returned by Enqueue when the operation costs more than
// the rate limiter's MaxCapacity, so it could never be released.
type TooExpensiveError struct{}

func (e TooExpensiveError) Error() string {
	return "batcher: the operation costs more than the rate limiter's maximum capacity"
}

// TooManyAttemptsError is returned by Enqueue when the operation has already
// been attempted as many times as its watcher's MaxAttempts allows.
type TooManyAttemptsError struct{}

func (e TooManyAttemptsError) Error() string {
	return "batcher: the operation has reached its watcher's maximum number of attempts"
}

// UndefinedLeaseManagerError is returned by a shared resource that has no
// LeaseManager to hold its partitions in.
type UndefinedLeaseManagerError struct{}

func (e UndefinedLeaseManagerError) Error() string {
	return "batcher: the shared resource has no lease manager"
}

// UndefinedSharedCapacityError is returned by Provision when the shared
// capacity is zero.
type UndefinedSharedCapacityError struct{}

func (e UndefinedSharedCapacityError) Error() string {
	return "batcher: the shared capacity must be greater than zero"
}

// BatcherStoppedError is returned by Enqueue and EnqueueContext once Stop or
// Shutdown has been called; the operation was not accepted.
type BatcherStoppedError struct{}

func (e BatcherStoppedError) Error() string {
	return "batcher: the batcher is stopped and accepts no more operations"
}

// LeaseConflictError is returned by a LeaseManager when a lease operation
// found the partition leased by another owner, or not leased by the caller.
type LeaseConflictError struct {
	Partition int
}

func (e LeaseConflictError) Error() string {
	return fmt.Sprintf("batcher: partition %d is leased by another owner", e.Partition)
}

// PartitionMissingError is returned by a LeaseManager when the partition (or
// its container) does not exist in the store, as after the store lost its
// data; a shared resource provisions again when it sees it.
type PartitionMissingError struct {
	Partition int
}

func (e PartitionMissingError) Error() string {
	return fmt.Sprintf("batcher: partition %d does not exist in the store", e.Partition)
}

// ShutdownIncompleteError is returned by Shutdown when operations were left
// unreleased; it wraps the reason (usually the context's error).
type ShutdownIncompleteError struct {
	Unreleased uint32
	Err        error
}

func (e ShutdownIncompleteError) Error() string {
	return fmt.Sprintf("batcher: shutdown left %d operations unreleased: %v", e.Unreleased, e.Err)
}

// Unwrap returns the reason the shutdown did not finish.
func (e ShutdownIncompleteError) Unwrap() error { return e.Err }

// InvalidSettingError is returned by Start when a With method was given a
// value it cannot use, such as a non-positive interval; the batcher keeps the
// default for that setting.
type InvalidSettingError struct {
	Setting string
	Value   string
}

func (e InvalidSettingError) Error() string {
	return fmt.Sprintf("batcher: invalid value %s for %s", e.Value, e.Setting)
}

// AzureCredentialError is returned by the Azure lease manager (and so by
// AzureSharedResource.Provision) when no way to authenticate to the storage
// account was configured: WithMasterKey, WithCredential or
// WithConnectionString.
type AzureCredentialError struct {
	Account string
}

func (e AzureCredentialError) Error() string {
	return fmt.Sprintf("batcher: no credential for azure storage account %q; use WithMasterKey, WithCredential or WithConnectionString", e.Account)
}

// AzureConfigError is returned by the Azure lease manager when its
// configuration cannot address a container: an empty name, or a connection
// string or key the SDK rejects (Err).
type AzureConfigError struct {
	Reason string
	Err    error
}

func (e AzureConfigError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("batcher: azure storage configuration: %s: %v", e.Reason, e.Err)
	}
	return "batcher: azure storage configuration: " + e.Reason
}

// Unwrap returns the error the SDK reported, if any.
func (e AzureConfigError) Unwrap() error { return e.Err }

// LeaseDurationError is returned when a lease duration is outside what the
// store grants: Azure Blob Storage takes 15 to 60 seconds.
type LeaseDurationError struct {
	Duration time.Duration
	Min      time.Duration
	Max      time.Duration
}

func (e LeaseDurationError) Error() string {
	return fmt.Sprintf("batcher: lease duration %v is outside the %v to %v the store grants", e.Duration, e.Min, e.Max)
}
