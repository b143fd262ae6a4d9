// Package gobatcher measures what Enqueue and the buffer cost in time and
// memory, beside github.com/plasne/go-batcher v1.8.0 in the same run: one
// million operations built beforehand, a buffer of one million, enqueued
// before Start and into a started batcher whose rate limiter grants nothing.
// It is a module of its own so that go-batcher stays out of the main go.mod.
//
//	cd bench/gobatcher && go test -run '^$' -bench . -benchtime 1x -count 3
package gobatcher
