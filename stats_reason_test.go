package batcher

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestReasonOf checks that every error Enqueue returns has its reason and
// that an unknown error is not counted as any of them.
func TestReasonOf(t *testing.T) {
	for _, c := range []struct {
		err  error
		want RejectReason
	}{
		{NoOperationError{}, RejectNoOperation},
		{NoWatcherError{}, RejectNoWatcher},
		{TooExpensiveError{}, RejectTooExpensive},
		{TooManyAttemptsError{}, RejectTooManyAttempts},
		{BatcherStoppedError{}, RejectStopped},
		{BufferFullError{}, RejectBufferFull},
		{BufferNotAllocated{}, RejectBufferNotAllocated},
		{context.Canceled, RejectContext},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), RejectContext},
	} {
		if got, ok := reasonOf(c.err); !ok || got != c.want {
			t.Errorf("reasonOf(%v) = %v, %v; want %v", c.err, got, ok, c.want)
		}
	}
	if got, ok := reasonOf(errors.New("something else")); ok {
		t.Errorf("an unknown error was counted as %v", got)
	}
}
