package redislease_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine is left once the tests end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
