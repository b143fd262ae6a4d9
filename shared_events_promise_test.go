package batcher_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/batchertest"
	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/redislease"
)

// rivalManager lets another owner win the first partition this instance
// tries to acquire, just before its request reaches the store, as a second
// instance racing for it would.
type rivalManager struct {
	batcher.LeaseManager
	once  sync.Once
	taken chan int // the partition the rival won
}

func (m *rivalManager) Acquire(ctx context.Context, partition int, owner string, d time.Duration) error {
	m.once.Do(func() {
		if err := m.LeaseManager.Acquire(ctx, partition, "rival", time.Minute); err == nil {
			m.taken <- partition
		}
		close(m.taken)
	})
	return m.LeaseManager.Acquire(ctx, partition, owner, d)
}

// TestPromiseSharedEvents checks the shared-resource rows of the Events
// table of docs/batcher.md on the in-process and the Redis lease managers:
// "target | partitions wanted", "allocated / released / failed | partition
// index", "capacity | the new capacity", and "shutdown | ... every rate
// limiter", raised once by Stop ("is idempotent" for the Batcher; a rate
// limiter's Stop is called twice here too).
func TestPromiseSharedEvents(t *testing.T) {
	stores := map[string]func(t *testing.T) batcher.LeaseManager{
		"memory": func(*testing.T) batcher.LeaseManager { return batcher.NewMemoryLeaseManager() },
		"redis": func(t *testing.T) batcher.LeaseManager {
			c := redistest.Shared(t)
			prefix := "promise-shared-events-" + uuid.NewString()
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				keys, _ := c.Keys(ctx, "{"+prefix+"}:*").Result()
				if len(keys) > 0 {
					c.Del(ctx, keys...)
				}
			})
			return redislease.New(c, prefix)
		},
	}
	for _, name := range []string{"memory", "redis"} {
		t.Run(name, func(t *testing.T) {
			const shared, factor, reserved = 60, 10, 5 // 6 partitions
			mgr := &rivalManager{LeaseManager: stores[name](t), taken: make(chan int, 1)}
			rec := batchertest.NewRecorder()
			r := batcher.NewSharedResource(mgr, shared).WithFactor(factor).WithReservedCapacity(reserved).WithMaxInterval(20)
			r.AddListener(rec.Listener())
			startShared(t, r)

			r.GiveMe(reserved + 4*factor) // 4 partitions
			if got := spLastVal(rec, batcher.TargetEvent); got != 4 {
				t.Fatalf("GiveMe(%d): target event %d, want 4 partitions", reserved+4*factor, got)
			}
			rival, ok := <-mgr.taken
			if !ok {
				t.Fatal("the rival could not take the first partition tried")
			}
			waitFor(t, "the failed event of the partition the rival won", func() bool { return rec.Count(batcher.FailedEvent) > 0 })
			if got := rec.Named(batcher.FailedEvent)[0].Val; got != rival {
				t.Fatalf("failed event val %d, want the partition the rival won, %d", got, rival)
			}
			// The capacity is read from the resource, the events from the
			// listener's goroutine, which may deliver the last allocation
			// after the capacity changed.
			waitFor(t, "4 partitions held and their allocated events", func() bool {
				return r.Capacity() == reserved+4*factor && rec.Count(batcher.AllocatedEvent) >= 4
			})
			allocated := vals(rec, batcher.AllocatedEvent)
			if len(allocated) != 4 || slices.Contains(allocated, rival) || !distinctIn(allocated, shared/factor) {
				t.Fatalf("allocated events %v, want 4 distinct partition indices in [0, 6) without %d", allocated, rival)
			}
			waitFor(t, "the capacity event of 45", func() bool { return spLastVal(rec, batcher.CapacityEvent) == reserved+4*factor })

			r.GiveMe(reserved)
			if got := spLastVal(rec, batcher.TargetEvent); got != 0 {
				t.Fatalf("GiveMe(%d): target event %d, want 0 partitions", reserved, got)
			}
			waitFor(t, "the leases given back", func() bool { return r.Capacity() == reserved && len(vals(rec, batcher.ReleasedEvent)) == 4 })
			released := vals(rec, batcher.ReleasedEvent)
			slices.Sort(allocated)
			slices.Sort(released)
			if !slices.Equal(released, allocated) {
				t.Fatalf("released events %v, want the allocated partitions %v", released, allocated)
			}
			waitFor(t, "the capacity event of 5", func() bool { return spLastVal(rec, batcher.CapacityEvent) == reserved })

			r.Stop()
			r.Stop()
			if n := rec.Count(batcher.ShutdownEvent); n != 1 {
				t.Fatalf("%d shutdown events from Stop called twice, want 1", n)
			}
		})
	}
}

// vals returns the vals of the recorded events named name, in order.
func vals(rec *batchertest.Recorder, name string) []int {
	var out []int
	for _, e := range rec.Named(name) {
		out = append(out, e.Val)
	}
	return out
}

func distinctIn(xs []int, n int) bool {
	seen := map[int]bool{}
	for _, x := range xs {
		if x < 0 || x >= n || seen[x] {
			return false
		}
		seen[x] = true
	}
	return true
}
