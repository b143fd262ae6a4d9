package limit_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
)

func newMemory(t testing.TB, opts limit.MemoryOptions) *limit.Memory {
	t.Helper()
	m, err := limit.NewMemory(opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMemoryZeroAllocs(t *testing.T) {
	clock := limittest.NewClock(limittest.Epoch)
	m := newMemory(t, limit.MemoryOptions{Clock: clock})
	ctx := context.Background()
	for _, p := range []limit.Policy{
		limit.TokenBucket(1e6, limit.PerSecond(1e6)), limit.GCRA(limit.PerSecond(1e6), 1e6),
		limit.FixedWindow(1e6, time.Second), limit.SlidingWindow(1e6, time.Second),
		limit.RollingWindow(1e6, time.Second),
	} {
		key := "existing-" + string(p.Algorithm)
		if _, err := m.AllowN(ctx, key, p, 1); err != nil {
			t.Fatal(err)
		}
		// The rolling window's log grows to its working size first.
		for i := 0; i < 64; i++ {
			clock.Advance(time.Microsecond)
			m.AllowN(ctx, key, p, 1)
		}
		allocs := testing.AllocsPerRun(1000, func() {
			clock.Advance(time.Microsecond)
			if _, err := m.AllowN(ctx, key, p, 1); err != nil {
				t.Fatal(err)
			}
		})
		if p.Algorithm == limit.RollingWindowAlgorithm {
			// The log doubles as it fills, so a few allocations over
			// 1000 decisions remain; amortized they round to 0.
			if allocs >= 1 {
				t.Errorf("%s: %v allocs per decision", p.Algorithm, allocs)
			}
			continue
		}
		if allocs != 0 {
			t.Errorf("%s: %v allocs per decision on an existing key, want 0", p.Algorithm, allocs)
		}
	}
}

func TestMemoryRefuseNewKeys(t *testing.T) {
	ctx := context.Background()
	m := newMemory(t, limit.MemoryOptions{Shards: 4, MaxKeys: 8, WhenFull: limit.RefuseNewKeys,
		Clock: limittest.NewClock(limittest.Epoch)})
	p := limit.FixedWindow(10, time.Hour)
	for i := 0; i < 8; i++ {
		if d, err := m.AllowN(ctx, strconv.Itoa(i), p, 1); err != nil || !d.Allowed {
			t.Fatalf("key %d: %+v %v", i, d, err)
		}
	}
	d, err := m.AllowN(ctx, "new", p, 1)
	if !errors.Is(err, limit.ErrTooManyKeys) || d.Allowed || d.Reason != limit.ReasonKeyLimit {
		t.Fatalf("ninth key: %+v %v", d, err)
	}
	if d, err := m.AllowN(ctx, "3", p, 1); err != nil || !d.Allowed || d.Remaining != 8 {
		t.Fatalf("existing key when full: %+v %v", d, err)
	}
	if d, err := m.AllowN(ctx, "new", p, 0); err != nil || !d.Allowed {
		t.Fatalf("a look at a new key stores nothing and is not refused: %+v %v", d, err)
	}
	if st := m.Stats(); st.Keys != 8 || st.Refused != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestMemoryEvictLRU(t *testing.T) {
	ctx := context.Background()
	clock := limittest.NewClock(limittest.Epoch)
	m := newMemory(t, limit.MemoryOptions{Shards: 1, MaxKeys: 8, Clock: clock})
	p := limit.FixedWindow(10, time.Hour)
	for i := 0; i < 8; i++ {
		clock.Advance(time.Second)
		m.AllowN(ctx, strconv.Itoa(i), p, 1)
	}
	for i := 1; i < 8; i++ { // key 0 is now the least recently used
		clock.Advance(time.Second)
		m.AllowN(ctx, strconv.Itoa(i), p, 1)
	}
	if d, err := m.AllowN(ctx, "new", p, 1); err != nil || !d.Allowed {
		t.Fatalf("new key when full: %+v %v", d, err)
	}
	if st := m.Stats(); st.Keys != 8 || st.Evicted != 1 {
		t.Fatalf("stats %+v", st)
	}
	if d, _ := m.AllowN(ctx, "0", p, 0); d.Remaining != 10 {
		t.Fatalf("key 0 was not the one evicted: %+v", d)
	}
}

func TestMemoryCleanup(t *testing.T) {
	ctx := context.Background()
	clock := limittest.NewClock(limittest.Epoch)
	m := newMemory(t, limit.MemoryOptions{Clock: clock})
	tb := limit.TokenBucket(10, limit.PerSecond(10))
	roll := limit.RollingWindow(10, time.Second)
	for i := 0; i < 5000; i++ {
		m.AllowN(ctx, strconv.Itoa(i), tb, 1)
		m.AllowN(ctx, strconv.Itoa(i), roll, 1)
	}
	if n := m.Cleanup(); n != 0 {
		t.Fatalf("cleaned %d keys still in use", n)
	}
	clock.Advance(time.Second)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // decisions go on during the sweep
		defer wg.Done()
		for i := 0; i < 2000; i++ {
			m.AllowN(ctx, "busy", tb, 1)
		}
	}()
	n := m.Cleanup()
	wg.Wait()
	m.Cleanup()
	if st := m.Stats(); n < 9999 || st.Keys > 1 {
		t.Fatalf("cleaned %d, stats %+v: want every key at rest dropped", n, st)
	}
}

func TestMemoryTimeBackwards(t *testing.T) {
	ctx := context.Background()
	clock := limittest.NewClock(limittest.Epoch)
	m := newMemory(t, limit.MemoryOptions{Clock: clock})
	for _, p := range []limit.Policy{
		limit.TokenBucket(5, limit.PerSecond(1)), limit.GCRA(limit.PerSecond(1), 5),
		limit.FixedWindow(5, time.Second), limit.SlidingWindow(5, time.Second), limit.RollingWindow(5, time.Second),
	} {
		clock.Set(limittest.Epoch.Add(time.Hour))
		admitted := 0
		for i := 0; i < 10; i++ {
			if d, _ := m.AllowN(ctx, "k", p, 1); d.Allowed {
				admitted++
			}
		}
		// Back a day, then forward in small steps to where we were: no
		// capacity comes back, whatever the algorithm.
		clock.Set(limittest.Epoch.Add(-24 * time.Hour))
		for i := 0; i < 10; i++ {
			clock.Advance(time.Microsecond)
			if d, _ := m.AllowN(ctx, "k", p, 1); d.Allowed {
				admitted++
			}
		}
		if admitted != 5 {
			t.Errorf("%s: admitted %d, want 5", p.Algorithm, admitted)
		}
	}
}

func TestNewMemoryOptions(t *testing.T) {
	for _, o := range []limit.MemoryOptions{{Shards: 3}, {Shards: -1}, {MaxKeys: -1}, {WhenFull: 9}} {
		if _, err := limit.NewMemory(o); err == nil {
			t.Errorf("NewMemory(%+v) accepted", o)
		}
	}
}
