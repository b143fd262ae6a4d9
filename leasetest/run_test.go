package leasetest_test

import (
	"testing"

	"github.com/costwise/batcher/lease"
	"github.com/costwise/batcher/leasetest"
	"github.com/costwise/batcher/sharing"
)

// TestRun runs the suite with its defaults, as a store that needs no
// options does: about 35 s of real waits for the expiry subtests, spent in
// parallel with the package's other tests.
func TestRun(t *testing.T) {
	t.Parallel()
	leasetest.Run(t, func(t *testing.T) lease.Manager { return sharing.NewMemoryLeaseManager() })
}
