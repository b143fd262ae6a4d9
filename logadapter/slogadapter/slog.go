// Package slogadapter logs the events of package batcher with log/slog, at
// the levels of logadapter.LevelOf:
//
//	b.AddListener(slogadapter.Listener(logger, "orders"))
//
// Each record's message is the event's msg, or "batcher <event>" when it has
// none, and its attributes are source, event, val and, when the metadata is
// an error, err; batch operations are never logged (see package logadapter).
package slogadapter

import (
	"context"
	"log/slog"

	"github.com/costwise/batcher/logadapter"
)

// Level converts a logadapter level to the slog level.
func Level(l logadapter.Level) slog.Level {
	switch l {
	case logadapter.Debug:
		return slog.LevelDebug
	case logadapter.Warn:
		return slog.LevelWarn
	case logadapter.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// Listener returns an event listener, for AddListener, that logs every event
// to logger with the given source (the name of the batcher or resource). A
// nil logger means slog.Default(). Records below the logger's level cost a
// single Enabled call, which matters because some events are raised on the
// batcher's loop goroutine every capacity interval.
func Listener(logger *slog.Logger, source string) func(event string, val int, msg string, metadata interface{}) {
	if logger == nil {
		logger = slog.Default()
	}
	return func(event string, val int, msg string, metadata interface{}) {
		level := Level(logadapter.LevelOf(event))
		ctx := context.Background()
		if !logger.Enabled(ctx, level) {
			return
		}
		attrs := make([]slog.Attr, 0, 4)
		attrs = append(attrs, slog.String("source", source), slog.String("event", event), slog.Int("val", val))
		if err := logadapter.Err(metadata); err != nil {
			attrs = append(attrs, slog.Any("err", err))
		}
		logger.LogAttrs(ctx, level, logadapter.Message(event, msg), attrs...)
	}
}
