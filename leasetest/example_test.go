package leasetest_test

import (
	"testing"

	"github.com/costwise/batcher/lease"
	"github.com/costwise/batcher/leasetest"
	"github.com/costwise/batcher/sharing"
)

// The suite runs from a test of the lease manager's own package, given a
// function that returns a manager over an empty store of its own each time
// (a fresh container, key prefix or, here, memory manager). The example is
// compiled but not run: the suite needs the *testing.T of a test, and
// TestRun runs this one.
func ExampleRun() {
	testConformance := func(t *testing.T) {
		leasetest.Run(t, func(t *testing.T) lease.Manager {
			return sharing.NewMemoryLeaseManager()
		})
	}
	_ = testConformance // func TestConformance(t *testing.T) in a _test.go file
}
