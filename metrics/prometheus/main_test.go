package prometheus_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: every batcher and
// shared resource started here is stopped, and the collectors start none.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
