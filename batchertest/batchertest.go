// Package batchertest helps users of package batcher test their own code
// deterministically: a fake clock to move time by hand, a listener that
// records events and lets a test wait for them, and a rate limiter whose
// capacity the test sets.
package batchertest

import (
	"context"
	"sync"
	"time"

	"github.com/costwise/batcher/internal/clock"
)

// FakeClock is a batcher.Clock whose time moves only when Advance or Set is
// called; timers and tickers that fall due fire during the call. It is safe
// for concurrent use. Use WaitForWaiters before advancing to know that a
// Batcher's loop has armed its tickers (a started Batcher arms three).
type FakeClock = clock.Fake

// NewFakeClock returns a fake clock set to start; a zero start means
// 2024-01-01 00:00 UTC, so that zero times stay distinguishable.
func NewFakeClock(start time.Time) *FakeClock {
	if start.IsZero() {
		start = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return clock.NewFake(start)
}

// Event is one event recorded by a Recorder.
type Event struct {
	Name     string
	Val      int
	Msg      string
	Metadata interface{}
}

// Recorder records events from any number of sources. Register its Listener
// with AddListener. It is safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	events  []Event
	changed chan struct{}
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder {
	return &Recorder{changed: make(chan struct{})}
}

// Listener returns the function to pass to AddListener.
func (r *Recorder) Listener() func(event string, val int, msg string, metadata interface{}) {
	return func(event string, val int, msg string, metadata interface{}) {
		r.mu.Lock()
		r.events = append(r.events, Event{Name: event, Val: val, Msg: msg, Metadata: metadata})
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
	}
}

// Events returns a copy of every event recorded so far, in order.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// Named returns the recorded events with the given name, in order.
func (r *Recorder) Named(name string) []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Event
	for _, e := range r.events {
		if e.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// Count returns how many events with the given name were recorded.
func (r *Recorder) Count(name string) int {
	return len(r.Named(name))
}

// Reset forgets every recorded event.
func (r *Recorder) Reset() {
	r.mu.Lock()
	r.events = nil
	r.mu.Unlock()
}

// WaitFor blocks until at least n events with the given name were recorded
// or ctx ends, and returns those events; ok is false when ctx ended first.
func (r *Recorder) WaitFor(ctx context.Context, name string, n int) (events []Event, ok bool) {
	for {
		r.mu.Lock()
		ch := r.changed
		r.mu.Unlock()
		events = r.Named(name)
		if len(events) >= n {
			return events, true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return events, false
		}
	}
}
