// Package logadapter holds what the structured-log adapters in its
// sub-packages share: the level each batcher event is logged at, and which
// parts of an event may be logged. Use the sub-package for your logger:
//
//   - slogadapter for log/slog;
//   - zerologadapter for github.com/rs/zerolog.
//
// Both turn an event into one record whose message is the event's msg (see
// Message) and whose fields are source, event, val and err. Metadata is logged only when it is an
// error: the batch and error events carry the operations of a batch, which
// may hold user data, so only their count (val) is logged.
package logadapter

import "github.com/costwise/batcher/internal/events"

// Level is the severity an event is logged at.
type Level int

// The levels, from the chattiest to the most severe.
const (
	Debug Level = iota
	Info
	Warn
	Error
)

// String returns the level in lower case.
func (l Level) String() string {
	switch l {
	case Debug:
		return "debug"
	case Info:
		return "info"
	case Warn:
		return "warn"
	case Error:
		return "error"
	}
	return "unknown"
}

// LevelOf returns the level of an event:
//
//   - Error for error events;
//   - Warn for pause and audit-fail, which mean the datastore pushes back or
//     the target drifted;
//   - Info for lifecycle events (shutdown, resume, created-*, verified-*);
//   - Debug for the ones raised every capacity interval or every batch or
//     lease change (request, batch, target, capacity, allocated, released,
//     failed, audit-pass, audit-skip).
//
// An event it does not know is logged at Info, so that nothing new is lost.
func LevelOf(event string) Level {
	switch event {
	case events.ErrorEvent:
		return Error
	case events.PauseEvent, events.AuditFailEvent:
		return Warn
	case events.RequestEvent, events.BatchEvent, events.TargetEvent, events.CapacityEvent,
		events.AllocatedEvent, events.ReleasedEvent, events.FailedEvent,
		events.AuditPassEvent, events.AuditSkipEvent:
		return Debug
	}
	return Info
}

// Message is the log message of an event: msg when the event has one, else
// "batcher " and the event name ("batcher pause"), so that a log line reads
// well without its fields.
func Message(event, msg string) string {
	if msg != "" {
		return msg
	}
	return "batcher " + event
}

// Err returns metadata when it is an error and nil otherwise; it is the only
// part of the metadata the adapters log.
func Err(metadata interface{}) error {
	err, _ := metadata.(error)
	return err
}
