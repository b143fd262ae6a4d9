package sharing

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/clock"
)

// TestPromiseConfiguredMaxIntervalPacing checks "WithMaxInterval(ms) | 500 |
// pacing of the lease loop (listings every ms/2–ms while acquiring)" with
// other values than the default (TestPromiseDefaultMaxIntervalPacing checks
// 500): while every partition is leased to another owner and the resource
// wants capacity, it lists every ms/2 to ms, and takes freed partitions at
// its next listing, at most ms later.
func TestPromiseConfiguredMaxIntervalPacing(t *testing.T) {
	for _, ms := range []uint32{100, 2000} {
		t.Run(fmt.Sprintf("%d ms", ms), func(t *testing.T) {
			interval := time.Duration(ms) * time.Millisecond
			fake := clock.NewFake(simStart)
			mem := NewMemoryLeaseManager().WithClock(fake)
			store := &listings{Manager: mem, clock: fake}
			const shared = 4
			r := New(store, shared).WithClock(fake).WithOwner("me").WithMaxInterval(ms)
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
			span := 60 * interval
			end := simStart.Add(span)
			for fake.Now().Before(end) {
				next, ok := st.pass(ctx)
				if !ok {
					t.Fatalf("at %v the resource went idle while it wants capacity", fake.Now().Sub(simStart))
				}
				if next.After(fake.Now()) {
					fake.Set(next)
				}
			}
			store.mu.Lock()
			at := append([]time.Time(nil), store.at...)
			store.mu.Unlock()
			// 60 intervals at one listing per ms/2 to ms, the first at 0.
			if n := len(at); n < 60 || n > 121 {
				t.Errorf("%d listings in %v, want 60 to 121 (one every %v-%v)", n, span, interval/2, interval)
			}
			for i := 1; i < len(at); i++ {
				if gap := at[i].Sub(at[i-1]); gap < interval/2 || gap > interval {
					t.Fatalf("listing %d came %v after the one before, want %v-%v", i, gap, interval/2, interval)
				}
			}
			freed := fake.Now()
			for p := 0; p < shared; p++ {
				if err := mem.Release(ctx, p, "someone-else"); err != nil {
					t.Fatal(err)
				}
			}
			for r.Capacity() < shared {
				if d := fake.Now().Sub(freed); d > interval {
					t.Fatalf("capacity %d of %d %v after the partitions were freed, want all within %v", r.Capacity(), shared, d, interval)
				}
				next, _ := st.pass(ctx)
				if next.After(fake.Now()) {
					fake.Set(next)
				}
			}
		})
	}
}
