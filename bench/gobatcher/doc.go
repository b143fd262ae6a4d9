// Package gobatcher measures the batcher beside github.com/plasne/go-batcher
// v1.8.0 in the same run: throughput end to end (NewOperation to the last
// callback) at both libraries' default settings and at a 1 ms flush
// interval, and what Enqueue and the buffer cost in time and memory (one
// million operations built beforehand, a buffer of one million, enqueued
// before Start and into a started batcher whose rate limiter grants
// nothing). It is a module of its own so that go-batcher stays out of the
// main go.mod.
//
//	cd bench/gobatcher && go test -run '^$' -bench Throughput -benchtime 1000000x -count 5
//	cd bench/gobatcher && go test -run '^$' -bench Enqueue -benchtime 1x -count 3
package gobatcher
