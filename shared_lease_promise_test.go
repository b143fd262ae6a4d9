package batcher_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/batchertest"
	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/leasetest"
	"github.com/costwise/batcher/redislease"
)

// TestPromiseLeaseCountsUntilSendPlusDurationMinusMargin checks, for lease
// durations other than the default (TestPromiseSharedDefaultLeaseDuration
// checks 15 s), "A lease counts as capacity only from the moment its
// acquire/renew succeeded until (the moment that request was sent + lease
// duration − max(2 s, 10 %))" with DESIGN.md's "(at most a quarter of the
// lease)": with the store unreachable right after the acquisition, Capacity
// keeps the leases up to 1 ms before that moment and falls to the reserved
// capacity at it, on the in-process and the Redis lease managers.
func TestPromiseLeaseCountsUntilSendPlusDurationMinusMargin(t *testing.T) {
	durations := []struct {
		lease, counted time.Duration
	}{
		{60 * time.Second, 54 * time.Second},            // 10 %: 6 s
		{30 * time.Second, 27 * time.Second},            // 10 %: 3 s
		{8 * time.Second, 6 * time.Second},              // 2 s, a quarter
		{4 * time.Second, 3 * time.Second},              // a quarter: 1 s, not 2 s
		{time.Second, 750 * time.Millisecond},           // a quarter
		{100 * time.Millisecond, 75 * time.Millisecond}, // a quarter
	}
	stores := map[string]func(t *testing.T) batcher.LeaseManager{
		"memory": func(*testing.T) batcher.LeaseManager { return batcher.NewMemoryLeaseManager() },
		"redis": func(t *testing.T) batcher.LeaseManager {
			c := redistest.Shared(t)
			prefix := "promise-lease-margin-" + uuid.NewString()
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if keys, _ := c.Keys(ctx, "{"+prefix+"}:*").Result(); len(keys) > 0 {
					c.Del(ctx, keys...)
				}
			})
			return redislease.New(c, prefix)
		},
	}
	for _, store := range []string{"memory", "redis"} {
		for _, d := range durations {
			t.Run(store+"/"+d.lease.String(), func(t *testing.T) {
				start := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
				fake := batchertest.NewFakeClock(start)
				faults := leasetest.NewFaultManager(stores[store](t))
				const shared, reserved = 3, 2
				r := batcher.NewSharedResource(faults, shared).WithReservedCapacity(reserved).
					WithLeaseDuration(d.lease).WithClock(fake)
				startShared(t, r)
				r.GiveMe(shared + reserved)
				// The fake clock stands still while the loop acquires, so
				// every acquisition is sent at start.
				waitFor(t, "full capacity", func() bool { return r.Capacity() == shared+reserved })
				faults.SetFailure(errors.New("store unreachable"))

				fake.Set(start.Add(d.counted - time.Millisecond))
				if got := r.Capacity(); got != shared+reserved {
					t.Fatalf("%v lease, %v after it was sent: Capacity() = %d, want %d (still counted)",
						d.lease, d.counted-time.Millisecond, got, shared+reserved)
				}
				fake.Set(start.Add(d.counted))
				if got := r.Capacity(); got != reserved {
					t.Fatalf("%v lease, %v after it was sent: Capacity() = %d, want the reserved %d (counted until then)",
						d.lease, d.counted, got, reserved)
				}
			})
		}
	}
}
