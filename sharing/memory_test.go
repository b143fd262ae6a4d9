package sharing_test

import (
	"sync"
	"testing"
	"time"

	"github.com/costwise/batcher/lease"
	"github.com/costwise/batcher/sharing"

	"github.com/costwise/batcher/internal/clock"
	"github.com/costwise/batcher/leasetest"
)

// TestMemoryLeaseConformance runs the LeaseManager suite against the memory
// manager with a fake clock, so the expiry subtests take no real time.
func TestMemoryLeaseConformance(t *testing.T) {
	var mu sync.Mutex
	clocks := map[lease.Manager]*clock.Fake{}
	newManager := func(t *testing.T) lease.Manager {
		fake := clock.NewFake(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
		m := sharing.NewMemoryLeaseManager().WithClock(fake)
		mu.Lock()
		clocks[m] = fake
		mu.Unlock()
		return m
	}
	leasetest.RunWithOptions(t, newManager, leasetest.Options{
		Slack: time.Nanosecond,
		Wait: func(m lease.Manager, d time.Duration) {
			mu.Lock()
			fake := clocks[m]
			mu.Unlock()
			fake.Advance(d)
		},
	})
}

// TestMemoryLeaseConformanceRealClock runs the suite with the system clock
// and short leases, as a store that cannot be driven by hand would.
func TestMemoryLeaseConformanceRealClock(t *testing.T) {
	leasetest.RunWithOptions(t, func(t *testing.T) lease.Manager {
		return sharing.NewMemoryLeaseManager()
	}, leasetest.Options{
		ExpiryLeaseDuration: 200 * time.Millisecond,
		DemandTTL:           100 * time.Millisecond,
		Slack:               50 * time.Millisecond,
	})
}
