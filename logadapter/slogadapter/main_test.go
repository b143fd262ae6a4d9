package slogadapter_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: the batcher
// started here is stopped, and the listener starts none.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
