// Package zerologadapter logs the events of package batcher with
// github.com/rs/zerolog, at the levels of logadapter.LevelOf:
//
//	b.AddListener(zerologadapter.Listener(logger, "orders"))
//
// Each record's message is the event's msg, or "batcher <event>" when it has
// none, and its fields are source, event, val and, when the metadata is an
// error, error; batch operations are never logged (see package logadapter).
package zerologadapter

import (
	"github.com/rs/zerolog"

	"github.com/costwise/batcher/logadapter"
)

// Level converts a logadapter level to the zerolog level.
func Level(l logadapter.Level) zerolog.Level {
	switch l {
	case logadapter.Debug:
		return zerolog.DebugLevel
	case logadapter.Warn:
		return zerolog.WarnLevel
	case logadapter.Error:
		return zerolog.ErrorLevel
	}
	return zerolog.InfoLevel
}

// Listener returns an event listener, for AddListener, that logs every event
// to logger with the given source (the name of the batcher or resource).
// The logger is copied, as zerolog loggers are values. Events below the
// logger's level are dropped by zerolog before any field is written.
func Listener(logger zerolog.Logger, source string) func(event string, val int, msg string, metadata interface{}) {
	return func(event string, val int, msg string, metadata interface{}) {
		e := logger.WithLevel(Level(logadapter.LevelOf(event)))
		if e == nil {
			return
		}
		e = e.Str("source", source).Str("event", event).Int("val", val)
		if err := logadapter.Err(metadata); err != nil {
			e = e.Err(err)
		}
		e.Msg(logadapter.Message(event, msg))
	}
}
