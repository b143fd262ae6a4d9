// Package errs defines the error types that the batcher and the rate
// limiters below the root package both return. They are defined once, here,
// and aliased by package batcher and package sharing, so errors.As matches
// whichever name the caller uses.
package errs

import "fmt"

// RateLimiterImproperOrderError is returned by a rate limiter whose methods
// were called out of order: Start before Provision, or either after Stop.
type RateLimiterImproperOrderError struct{}

func (e RateLimiterImproperOrderError) Error() string {
	return "batcher: rate limiter methods were called out of order (Provision, then Start, then Stop)"
}

// InvalidSettingError is returned by Start when a With method was given a
// value it cannot use, such as a non-positive interval; the batcher keeps the
// default for that setting.
type InvalidSettingError struct {
	Setting string
	Value   string
}

func (e InvalidSettingError) Error() string {
	return fmt.Sprintf("batcher: invalid value %s for %s", e.Value, e.Setting)
}
