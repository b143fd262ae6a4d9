package batcher_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/costwise/batcher"
)

// TestPromiseErrorsTable checks the Errors section of docs/batcher.md for
// every error its table names: "All are comparable structs usable with
// errors.Is/errors.As; messages start with `batcher: `", and, from the
// style the errors follow, that a message prints the data the error
// carries. ShutdownIncompleteError "wraps the cause". The existing tests
// check the prefix of the errors Enqueue and Start return only.
func TestPromiseErrorsTable(t *testing.T) {
	cases := []struct {
		err  error
		data []string // what the message must print
	}{
		{batcher.NoOperationError{}, nil},
		{batcher.NoWatcherError{}, nil},
		{batcher.TooExpensiveError{}, nil},
		{batcher.TooManyAttemptsError{}, nil},
		{batcher.BatcherStoppedError{}, nil},
		{batcher.BufferFullError{}, nil},
		{batcher.BufferNotAllocated{}, nil},
		{batcher.BatcherImproperOrderError{}, nil},
		{batcher.InvalidSettingError{Setting: "FlushInterval", Value: "-1s"}, []string{"FlushInterval", "-1s"}},
		{batcher.ShutdownIncompleteError{Unreleased: 17, Err: context.DeadlineExceeded}, []string{"17", context.DeadlineExceeded.Error()}},
		{batcher.RateLimiterImproperOrderError{}, nil},
		{batcher.UndefinedSharedCapacityError{}, nil},
		{batcher.UndefinedLeaseManagerError{}, nil},
		{batcher.PartitionsOutOfRangeError{MaxCapacity: 50001, Factor: 100, PartitionCount: 501}, []string{"50001", "100", "501"}},
		{batcher.LeaseConflictError{Partition: 7}, []string{"7"}},
		{batcher.PartitionMissingError{Partition: 9}, []string{"9"}},
		{batcher.AzureCredentialError{}, nil},
		{batcher.AzureConfigError{}, nil},
		{batcher.LeaseDurationError{}, nil},
	}
	for _, tc := range cases {
		name := reflect.TypeOf(tc.err).String()
		t.Run(name, func(t *testing.T) {
			if k := reflect.TypeOf(tc.err).Kind(); k != reflect.Struct || !reflect.TypeOf(tc.err).Comparable() {
				t.Fatalf("%s is a %v, comparable %v: want a comparable struct", name, k, reflect.TypeOf(tc.err).Comparable())
			}
			wrapped := errors.Join(errors.New("context"), tc.err)
			if !errors.Is(wrapped, tc.err) {
				t.Fatalf("errors.Is does not find %s in a wrapping error", name)
			}
			target := reflect.New(reflect.TypeOf(tc.err))
			if !errors.As(wrapped, target.Interface()) || target.Elem().Interface() != tc.err {
				t.Fatalf("errors.As does not recover %s from a wrapping error", name)
			}
			msg := tc.err.Error()
			if !strings.HasPrefix(msg, "batcher: ") {
				t.Fatalf("%s: message %q does not start with \"batcher: \"", name, msg)
			}
			for _, d := range tc.data {
				if !strings.Contains(msg, d) {
					t.Fatalf("%s: message %q does not print %q", name, msg, d)
				}
			}
		})
	}
	sie := batcher.ShutdownIncompleteError{Unreleased: 1, Err: context.Canceled}
	if !errors.Is(sie, context.Canceled) {
		t.Fatal("ShutdownIncompleteError does not wrap its cause")
	}
}
