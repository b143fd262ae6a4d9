package limit

import (
	"errors"
	"fmt"
)

// ErrInvalidPolicy is matched by errors.Is for every *PolicyError.
var ErrInvalidPolicy = errors.New("limit: invalid policy")

// ErrInvalidCost is matched by errors.Is for every *CostError.
var ErrInvalidCost = errors.New("limit: invalid cost")

// ErrTooManyKeys is returned, with a denied decision, by a memory store that
// holds its maximum number of keys and refuses new ones.
var ErrTooManyKeys = errors.New("limit: too many keys")

// ErrStoreFailed is matched by errors.Is for every *StoreError.
var ErrStoreFailed = errors.New("limit: store failed")

// PolicyError reports a policy parameter that is missing or out of range.
type PolicyError struct {
	// Policy is the policy's name, possibly empty.
	Policy string
	// Field names the parameter: "algorithm", "limit", "rate", "window", ...
	Field string
	// Reason says what is wrong.
	Reason string
}

// Error returns "limit: policy NAME: FIELD: REASON".
func (e *PolicyError) Error() string {
	return fmt.Sprintf("limit: policy %q: %s: %s", e.Policy, e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidPolicy) true.
func (e *PolicyError) Is(target error) bool { return target == ErrInvalidPolicy }

// CostError reports a negative cost, or a settle delta out of range, or a
// fractional cost CostFromFloat cannot count.
type CostError struct {
	// Cost is the cost given.
	Cost int64
	// Tokens is the fractional cost given to CostFromFloat, when that is
	// what was refused; 0 otherwise.
	Tokens float64
}

// Error returns "limit: invalid cost N: REASON".
func (e *CostError) Error() string {
	if e.Tokens != 0 { // NaN included
		return fmt.Sprintf("limit: invalid cost %g: must be a finite number, 0 or more, of at most 2^50 units", e.Tokens)
	}
	return fmt.Sprintf("limit: invalid cost %d: must be 0 or more", e.Cost)
}

// Is makes errors.Is(err, ErrInvalidCost) true.
func (e *CostError) Is(target error) bool { return target == ErrInvalidCost }

// StoreError reports that a store's backend failed (a network error, a
// timeout, a server error). It wraps the cause.
type StoreError struct {
	// Op is the operation: "allow", "allow all", "count all", "settle", "reset".
	Op string
	// Err is the cause.
	Err error
}

// Error returns "limit: store failed: OP: CAUSE".
func (e *StoreError) Error() string { return fmt.Sprintf("limit: store failed: %s: %v", e.Op, e.Err) }

// Unwrap returns the cause.
func (e *StoreError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrStoreFailed) true.
func (e *StoreError) Is(target error) bool { return target == ErrStoreFailed }

// OptionError reports a bad option of a store or wrapper constructor.
type OptionError struct {
	// Option names the option, as its field name.
	Option string
	// Reason says what is wrong.
	Reason string
}

// Error returns "limit: option NAME: REASON".
func (e *OptionError) Error() string { return "limit: option " + e.Option + ": " + e.Reason }
