package batcher

import "github.com/costwise/batcher/internal/events"

// Event names raised to listeners. The values are those of go-batcher v1.8.0;
// package sharing raises the same strings.
const (
	// BatchEvent is raised for every batch when WithEmitBatch is set; val is
	// the number of operations and metadata the []IOperation.
	BatchEvent = events.BatchEvent
	// PauseEvent is raised when the batcher pauses; val is the pause length in
	// milliseconds.
	PauseEvent = events.PauseEvent
	// ResumeEvent is raised when a pause ends; val is the length of the pause
	// that ended in milliseconds.
	ResumeEvent = events.ResumeEvent
	// ShutdownEvent is raised once when a batcher or rate limiter stops; for a
	// batcher, val is the number of operations left unreleased.
	ShutdownEvent = events.ShutdownEvent
	// AuditPassEvent is raised when an audit finds the target consistent.
	AuditPassEvent = events.AuditPassEvent
	// AuditFailEvent is raised when an audit finds a target above zero with
	// nothing outstanding; val is the target that was reset to zero.
	AuditFailEvent = events.AuditFailEvent
	// AuditSkipEvent is raised when an audit cannot judge the target because
	// work is buffered or a batch was released recently.
	AuditSkipEvent = events.AuditSkipEvent
	// RequestEvent is raised each capacity interval; val is the target asked
	// of the rate limiter.
	RequestEvent = events.RequestEvent
	// CapacityEvent is raised by a rate limiter whenever its capacity changes;
	// val is the new capacity.
	CapacityEvent = events.CapacityEvent
	// ReleasedEvent is raised when a shared resource gives up a partition; val
	// is its index.
	ReleasedEvent = events.ReleasedEvent
	// AllocatedEvent is raised when a shared resource wins a partition; val is
	// its index.
	AllocatedEvent = events.AllocatedEvent
	// TargetEvent is raised when a shared resource's target changes; val is
	// the new target.
	TargetEvent = events.TargetEvent
	// VerifiedContainerEvent is raised by Provision when the container exists;
	// msg is its URL.
	VerifiedContainerEvent = events.VerifiedContainerEvent
	// CreatedContainerEvent is raised by Provision when it created the
	// container; msg is its URL.
	CreatedContainerEvent = events.CreatedContainerEvent
	// VerifiedBlobEvent is raised by Provision for a partition that exists;
	// val is its index.
	VerifiedBlobEvent = events.VerifiedBlobEvent
	// CreatedBlobEvent is raised by Provision for a partition it created; val
	// is its index.
	CreatedBlobEvent = events.CreatedBlobEvent
	// FailedEvent is raised when a shared resource could not win a partition
	// (another instance holds it); val is its index. It is not an error.
	FailedEvent = events.FailedEvent
	// ErrorEvent is raised for an unexpected condition; msg describes it.
	ErrorEvent = events.ErrorEvent
)

// Listener is the signature of an event listener: the event name, an integer
// value, a message and optional metadata, whose meaning depends on the event.
// AddListener of the Batcher and of every rate limiter in this module takes
// one.
type Listener = events.Listener
