package sharing_test

import (
	"context"
	"errors"
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

// TestProvisionValidatesSettings checks that a value a With method cannot
// use is reported by Provision as InvalidSettingError, and that With calls
// after Provision change nothing.
func TestProvisionValidatesSettings(t *testing.T) {
	ctx := context.Background()
	for name, configure := range map[string]func(r *sharing.Resource){
		"Factor":        func(r *sharing.Resource) { r.WithFactor(0) },
		"MaxInterval":   func(r *sharing.Resource) { r.WithMaxInterval(0) },
		"LeaseDuration": func(r *sharing.Resource) { r.WithLeaseDuration(-time.Second) },
		"Owner":         func(r *sharing.Resource) { r.WithOwner("") },
	} {
		r := sharing.New(sharing.NewMemoryLeaseManager(), 10)
		configure(r)
		var invalid sharing.InvalidSettingError
		if err := r.Provision(ctx); !errors.As(err, &invalid) || invalid.Setting != name {
			t.Errorf("%s: Provision returned %v, want InvalidSettingError for %s", name, err, name)
		}
	}

	r := sharing.New(sharing.NewMemoryLeaseManager(), 10).WithOwner("a")
	if err := r.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	r.WithFactor(5).WithReservedCapacity(3).WithOwner("b").WithMaxInterval(0)
	if err := r.Provision(ctx); err != nil {
		t.Fatalf("Provision again after late With calls: %v", err)
	}
	if r.MaxCapacity() != 10 || r.Owner() != "a" {
		t.Fatalf("With after Provision changed settings: max capacity %d, owner %q", r.MaxCapacity(), r.Owner())
	}
}
