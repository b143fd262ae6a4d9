package sharing

import (
	"fmt"

	"github.com/costwise/batcher/internal/errs"
	"github.com/costwise/batcher/internal/events"
	"github.com/costwise/batcher/lease"
)

// RateLimiterImproperOrderError is returned by a Resource whose methods were
// called out of order: Start before Provision, or either after Stop. It is
// the type of the same name in package batcher.
type RateLimiterImproperOrderError = errs.RateLimiterImproperOrderError

// ListenerPanicError is the metadata of the error event raised, to the
// other listeners, when a listener panicked; the panic is recovered and the
// listener stays registered. It is the type of the same name in package
// batcher.
type ListenerPanicError = events.ListenerPanicError

// InvalidSettingError is returned by Provision when a With method was given
// a value the resource cannot use. It is the type of the same name in
// package batcher.
type InvalidSettingError = errs.InvalidSettingError

// PartitionsOutOfRangeError is returned by Provision when the shared capacity
// divided by the factor (rounded up) gives more partitions than a shared
// resource supports (lease.MaxPartitions).
type PartitionsOutOfRangeError struct {
	MaxCapacity    uint32
	Factor         uint32
	PartitionCount int
}

func (e PartitionsOutOfRangeError) Error() string {
	return fmt.Sprintf("batcher: shared capacity %d with factor %d needs %d partitions, more than the %d allowed",
		e.MaxCapacity, e.Factor, e.PartitionCount, lease.MaxPartitions)
}

// UndefinedLeaseManagerError is returned by a shared resource that has no
// lease.Manager to hold its partitions in.
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
