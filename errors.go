package batcher

import "fmt"

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

// BatcherStoppedError is returned by Enqueue and EnqueueContext once Stop or
// Shutdown has been called; the operation was not accepted.
type BatcherStoppedError struct{}

func (e BatcherStoppedError) Error() string {
	return "batcher: the batcher is stopped and accepts no more operations"
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
