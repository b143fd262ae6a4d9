package batcher_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine is left once the tests end: every
// batcher, resource and listener a test starts is stopped by its end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
