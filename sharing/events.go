package sharing

import (
	"github.com/costwise/batcher/internal/events"
	"github.com/costwise/batcher/lease"
)

// Events a Resource raises to its listeners; the values are those of the
// constants of the same names in package batcher (go-batcher v1.8.0's).
const (
	// CapacityEvent is raised whenever the capacity changes; val is the new
	// capacity. A change the loop sees (leases won, lost or no longer
	// counting) is raised after the storage call during which it happened,
	// so at most one call timeout (min(lease/3, 5 s)) late when the store
	// hangs.
	CapacityEvent = events.CapacityEvent
	// TargetEvent is raised when the target changes; val is the new target.
	TargetEvent = events.TargetEvent
	// AllocatedEvent is raised when the resource wins a partition; val is
	// its index.
	AllocatedEvent = events.AllocatedEvent
	// ReleasedEvent is raised when the resource gives up a partition; val is
	// its index and msg the reason.
	ReleasedEvent = events.ReleasedEvent
	// FailedEvent is raised when the resource could not win a partition
	// (another instance holds it); val is its index. It is not an error.
	FailedEvent = events.FailedEvent
	// ErrorEvent is raised for an unexpected condition, such as a storage
	// error; msg describes it.
	ErrorEvent = events.ErrorEvent
	// ShutdownEvent is raised once when the resource stops.
	ShutdownEvent = events.ShutdownEvent
	// VerifiedContainerEvent is raised by Provision when the container
	// exists; msg is its address.
	VerifiedContainerEvent = lease.VerifiedContainerEvent
	// CreatedContainerEvent is raised by Provision when it created the
	// container; msg is its address.
	CreatedContainerEvent = lease.CreatedContainerEvent
	// VerifiedBlobEvent is raised by Provision for a partition that exists;
	// val is its index.
	VerifiedBlobEvent = lease.VerifiedBlobEvent
	// CreatedBlobEvent is raised by Provision for a partition it created;
	// val is its index.
	CreatedBlobEvent = lease.CreatedBlobEvent
)
