// Package events holds what the batcher and the rate limiters below it share
// about events: the event names (those of go-batcher v1.8.0), the listener
// signature and the listener registry. The root package and package sharing
// re-export the names; they are defined once, here, so that both raise the
// same strings.
package events

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/costwise/batcher/lease"
	"github.com/google/uuid"
)

// Event names raised to listeners. The values are those of go-batcher v1.8.0.
const (
	// BatchEvent is raised for every batch when WithEmitBatch is set; val is
	// the number of operations and metadata the []IOperation.
	BatchEvent = "batch"
	// PauseEvent is raised when the batcher pauses; val is the pause length in
	// milliseconds.
	PauseEvent = "pause"
	// ResumeEvent is raised when a pause ends; val is the length of the pause
	// that ended in milliseconds.
	ResumeEvent = "resume"
	// ShutdownEvent is raised once when a batcher or rate limiter stops; for a
	// batcher, val is the number of operations left unreleased.
	ShutdownEvent = "shutdown"
	// AuditPassEvent is raised when an audit finds the target consistent.
	AuditPassEvent = "audit-pass"
	// AuditFailEvent is raised when an audit finds a target above zero with
	// nothing outstanding; val is the target that was reset to zero.
	AuditFailEvent = "audit-fail"
	// AuditSkipEvent is raised when an audit cannot judge the target because
	// work is buffered or a batch was released recently.
	AuditSkipEvent = "audit-skip"
	// RequestEvent is raised each capacity interval; val is the target asked
	// of the rate limiter.
	RequestEvent = "request"
	// CapacityEvent is raised by a rate limiter whenever its capacity changes;
	// val is the new capacity.
	CapacityEvent = "capacity"
	// ReleasedEvent is raised when a shared resource gives up a partition; val
	// is its index.
	ReleasedEvent = "released"
	// AllocatedEvent is raised when a shared resource wins a partition; val is
	// its index.
	AllocatedEvent = "allocated"
	// TargetEvent is raised when a shared resource's target changes; val is
	// the new target.
	TargetEvent = "target"
	// VerifiedContainerEvent is raised by Provision when the container exists;
	// msg is its URL.
	VerifiedContainerEvent = lease.VerifiedContainerEvent
	// CreatedContainerEvent is raised by Provision when it created the
	// container; msg is its URL.
	CreatedContainerEvent = lease.CreatedContainerEvent
	// VerifiedBlobEvent is raised by Provision for a partition that exists;
	// val is its index.
	VerifiedBlobEvent = lease.VerifiedBlobEvent
	// CreatedBlobEvent is raised by Provision for a partition it created; val
	// is its index.
	CreatedBlobEvent = lease.CreatedBlobEvent
	// FailedEvent is raised when a shared resource could not win a partition
	// (another instance holds it); val is its index. It is not an error.
	FailedEvent = "failed"
	// ErrorEvent is raised for an unexpected condition; msg describes it.
	ErrorEvent = "error"
)

// Listener is the signature of an event listener: the event name, an integer
// value, a message and optional metadata, whose meaning depends on the event.
type Listener = func(event string, val int, msg string, metadata interface{})

// Registry is a registry of event listeners. Emit reads a copy-on-write
// snapshot, so listeners run without any lock held and may add or remove
// listeners, including themselves. The zero value is ready to use and it is
// safe for concurrent use.
type Registry struct {
	mu   sync.Mutex // serialises writers
	list atomic.Pointer[[]entry]
}

type entry struct {
	id uuid.UUID
	fn Listener
}

// Add registers fn and returns the id that removes it.
func (l *Registry) Add(fn Listener) uuid.UUID {
	id := uuid.New()
	l.mu.Lock()
	defer l.mu.Unlock()
	var next []entry
	if cur := l.list.Load(); cur != nil {
		next = append(next, (*cur)...)
	}
	next = append(next, entry{id: id, fn: fn})
	l.list.Store(&next)
	return id
}

// Remove unregisters the listener with id; an unknown id is ignored.
func (l *Registry) Remove(id uuid.UUID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := l.list.Load()
	if cur == nil {
		return
	}
	next := make([]entry, 0, len(*cur))
	for _, e := range *cur {
		if e.id != id {
			next = append(next, e)
		}
	}
	l.list.Store(&next)
}

// Empty reports whether no listener is registered.
func (l *Registry) Empty() bool {
	cur := l.list.Load()
	return cur == nil || len(*cur) == 0
}

// Emit calls every listener registered at the time of the call, in the order
// they were added. It must not be called with any lock held.
//
// A listener that panics does not crash the caller (a loop goroutine,
// usually): the panic is recovered, the other listeners get an error event
// whose metadata is a ListenerPanicError, and the listener stays registered.
// A listener that panics on that error event is not reported again, so a
// panicking listener cannot start an endless chain of reports.
func (l *Registry) Emit(event string, val int, msg string, metadata interface{}) {
	cur := l.list.Load()
	if cur == nil {
		return
	}
	for i, e := range *cur {
		if p, panicked := call(e.fn, event, val, msg, metadata); panicked {
			reportPanic(*cur, i, event, p)
		}
	}
}

// reportPanic raises an error event about the panic p of listeners[i]
// during event to every other listener, ignoring their own panics.
func reportPanic(listeners []entry, i int, event string, p interface{}) {
	err := ListenerPanicError{Event: event, Value: p}
	msg := err.Error()
	for j, e := range listeners {
		if j != i {
			_, _ = call(e.fn, ErrorEvent, 0, msg, err)
		}
	}
}

// call calls fn and recovers a panic, which it returns.
func call(fn Listener, event string, val int, msg string, metadata interface{}) (p interface{}, panicked bool) {
	defer func() {
		if panicked {
			p = recover()
		}
	}()
	panicked = true
	fn(event, val, msg, metadata)
	return nil, false
}

// ListenerPanicError is the metadata of the error event raised when a
// listener panicked: the event it was called with and the value it panicked
// with.
type ListenerPanicError struct {
	Event string
	Value interface{}
}

func (e ListenerPanicError) Error() string {
	return fmt.Sprintf("batcher: a listener panicked on event %q: %v", e.Event, e.Value)
}

// Unwrap returns the panic value when it is an error.
func (e ListenerPanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}
