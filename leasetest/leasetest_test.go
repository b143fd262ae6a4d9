package leasetest_test

import (
	"testing"
	"time"

	"github.com/costwise/batcher/lease"
	"github.com/costwise/batcher/sharing"

	"github.com/costwise/batcher/leasetest"
)

// TestMemory runs the suite against the memory lease manager on the system
// clock, with leases short enough to wait for.
func TestMemory(t *testing.T) {
	leasetest.RunWithOptions(t, func(t *testing.T) lease.Manager {
		return sharing.NewMemoryLeaseManager()
	}, leasetest.Options{
		LeaseDuration:       time.Minute,
		ExpiryLeaseDuration: 300 * time.Millisecond,
		DemandTTL:           200 * time.Millisecond,
		Slack:               50 * time.Millisecond,
	})
}

// TestSkipExpiry checks that SkipExpiry leaves out only the waiting
// subtests, as the Azure tests use it.
func TestSkipExpiry(t *testing.T) {
	start := time.Now()
	leasetest.RunWithOptions(t, func(t *testing.T) lease.Manager {
		return sharing.NewMemoryLeaseManager()
	}, leasetest.Options{SkipExpiry: true})
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the suite without expiry subtests took %v", d)
	}
}
