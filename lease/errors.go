package lease

import (
	"fmt"
	"time"
)

// ConflictError is returned by a Manager when a lease operation found the
// partition leased by another owner, or not leased by the caller.
type ConflictError struct {
	Partition int
}

func (e ConflictError) Error() string {
	return fmt.Sprintf("batcher: partition %d is leased by another owner", e.Partition)
}

// PartitionMissingError is returned by a Manager when the partition (or its
// container) does not exist in the store, as after the store lost its data;
// a shared resource provisions again when it sees it.
type PartitionMissingError struct {
	Partition int
}

func (e PartitionMissingError) Error() string {
	return fmt.Sprintf("batcher: partition %d does not exist in the store", e.Partition)
}

// DurationError is returned when a lease duration is outside what the store
// grants: Azure Blob Storage takes 15 to 60 seconds.
type DurationError struct {
	Duration time.Duration
	Min      time.Duration
	Max      time.Duration
}

func (e DurationError) Error() string {
	return fmt.Sprintf("batcher: lease duration %v is outside the %v to %v the store grants", e.Duration, e.Min, e.Max)
}
