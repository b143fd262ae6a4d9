package sharing

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/clock"
	"github.com/costwise/batcher/lease"
)

// listings is a lease.Manager that notes the fake time of every listing
// (Snapshot).
type listings struct {
	lease.Manager
	clock *clock.Fake
	mu    sync.Mutex
	at    []time.Time
}

func (l *listings) Snapshot(ctx context.Context, count int) (lease.Snapshot, error) {
	l.mu.Lock()
	l.at = append(l.at, l.clock.Now())
	l.mu.Unlock()
	return l.Manager.Snapshot(ctx, count)
}

// TestPromiseDefaultMaxIntervalPacing checks docs/batcher.md's
// "WithMaxInterval(ms) | 500 | ... listings every ms/2–ms while acquiring"
// with a resource built without WithMaxInterval: while every partition is
// leased to another owner and the resource wants capacity, it lists the
// store every 250 to 500 ms, passes driven by hand on a fake clock.
func TestPromiseDefaultMaxIntervalPacing(t *testing.T) {
	fake := clock.NewFake(simStart)
	mem := NewMemoryLeaseManager().WithClock(fake)
	store := &listings{Manager: mem, clock: fake}
	const shared = 4
	r := New(store, shared).WithClock(fake).WithOwner("me")
	ctx := context.Background()
	if err := r.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	for p := 0; p < shared; p++ {
		if err := mem.Acquire(ctx, p, "someone-else", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	r.GiveMe(shared)
	st := newLoop(r)
	end := simStart.Add(30 * time.Second)
	for fake.Now().Before(end) {
		next, ok := st.pass(ctx)
		if !ok {
			t.Fatalf("at %v the resource went idle while it wants capacity", fake.Now().Sub(simStart))
		}
		if next.After(fake.Now()) {
			fake.Set(next)
		}
	}
	if got := r.Capacity(); got != 0 {
		t.Fatalf("capacity %d with every partition leased to another owner", got)
	}
	store.mu.Lock()
	at := append([]time.Time(nil), store.at...)
	store.mu.Unlock()
	// 30 s at one listing per 250-500 ms, the first at 0: 60 to 121.
	if n := len(at); n < 60 || n > 121 {
		t.Errorf("%d listings in 30 s, want 60 to 121 (one every 250-500 ms)", n)
	}
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < 250*time.Millisecond || gap > 500*time.Millisecond {
			t.Errorf("listing %d came %v after the one before, want 250-500 ms", i, gap)
		}
	}

	// Once the other owner lets the partitions go, the next listing, at
	// most 500 ms later, takes them.
	freed := fake.Now()
	for p := 0; p < shared; p++ {
		if err := mem.Release(ctx, p, "someone-else"); err != nil {
			t.Fatal(err)
		}
	}
	for r.Capacity() < shared {
		if d := fake.Now().Sub(freed); d > 500*time.Millisecond {
			t.Fatalf("capacity %d of %d %v after the partitions were freed, want all within 500 ms", r.Capacity(), shared, d)
		}
		next, _ := st.pass(ctx)
		if next.After(fake.Now()) {
			fake.Set(next)
		}
	}
}
