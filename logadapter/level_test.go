package logadapter_test

import (
	"errors"
	"testing"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/logadapter"
)

// eventLevels is the contract of LevelOf for every event the library
// raises, plus an unknown one.
var eventLevels = map[string]logadapter.Level{
	batcher.ErrorEvent:             logadapter.Error,
	batcher.AuditFailEvent:         logadapter.Warn,
	batcher.PauseEvent:             logadapter.Warn,
	batcher.ResumeEvent:            logadapter.Info,
	batcher.ShutdownEvent:          logadapter.Info,
	batcher.CreatedContainerEvent:  logadapter.Info,
	batcher.VerifiedContainerEvent: logadapter.Info,
	batcher.CreatedBlobEvent:       logadapter.Info,
	batcher.VerifiedBlobEvent:      logadapter.Info,
	batcher.FailedEvent:            logadapter.Debug,
	batcher.AllocatedEvent:         logadapter.Debug,
	batcher.ReleasedEvent:          logadapter.Debug,
	batcher.RequestEvent:           logadapter.Debug,
	batcher.BatchEvent:             logadapter.Debug,
	batcher.TargetEvent:            logadapter.Debug,
	batcher.CapacityEvent:          logadapter.Debug,
	batcher.AuditPassEvent:         logadapter.Debug,
	batcher.AuditSkipEvent:         logadapter.Debug,
	"some-future-event":            logadapter.Info,
}

func TestLevelOf(t *testing.T) {
	for event, want := range eventLevels {
		if got := logadapter.LevelOf(event); got != want {
			t.Errorf("LevelOf(%q) = %v, want %v", event, got, want)
		}
	}
}

func TestMessageAndErr(t *testing.T) {
	if got := logadapter.Message(batcher.PauseEvent, ""); got != "batcher pause" {
		t.Errorf("Message without msg = %q", got)
	}
	if got := logadapter.Message(batcher.ErrorEvent, "batcher: boom"); got != "batcher: boom" {
		t.Errorf("Message with msg = %q", got)
	}
	cause := errors.New("cause")
	if logadapter.Err(cause) != cause || logadapter.Err([]batcher.IOperation{}) != nil || logadapter.Err(nil) != nil {
		t.Error("Err must return the metadata only when it is an error")
	}
}
