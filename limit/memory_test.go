package limit_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
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

// TestMemoryExactUnderChurn has 32 goroutines spend on 8 keys, and an
// AllowAll pair them with new keys, while others add and reset keys (which
// grows the tables and leaves removed slots), settle, clean up, and move
// the clock on by seconds (which rebases the token bucket's packed states
// every few seconds). At one token an hour, each key must admit exactly its
// capacity of 50: no spend lost, none doubled. Each round starts 100 hours
// later, with every key back at rest, so Cleanup races the spenders to
// drop them.
func TestMemoryExactUnderChurn(t *testing.T) {
	ctx := context.Background()
	for _, p := range []limit.Policy{
		limit.TokenBucket(50, limit.Rate{Count: 1, Period: time.Hour}),
		limit.GCRA(limit.Rate{Count: 1, Period: time.Hour}, 50),
	} {
		clock := limittest.NewClock(limittest.Epoch)
		m := newMemory(t, limit.MemoryOptions{Shards: 2, Clock: clock})
		for round := 0; round < 2; round++ {
			clock.Advance(100 * time.Hour)
			exactUnderChurn(t, ctx, m, clock, p, round)
		}
	}
}

func exactUnderChurn(t *testing.T, ctx context.Context, m *limit.Memory, clock *limittest.Clock, p limit.Policy, round int) {
	const keys, spenders = 8, 32
	var admitted [keys]atomic.Int64
	var ticked atomic.Int64
	stop := make(chan struct{})
	var bg sync.WaitGroup
	churn := func(f func(i int)) { untilClosed(&bg, stop, f) }
	churn(func(i int) { // new keys, then back to rest
		k := "filler-" + strconv.Itoa(i)
		m.AllowN(ctx, k, p, 1)
		if i%3 == 0 {
			m.Reset(ctx, k, p)
		} else {
			m.Settle(ctx, k, p, -1)
		}
	})
	churn(func(int) { m.Cleanup() })
	churn(func(i int) {
		if i%10 == 0 && ticked.Load() < 200 { // 200 s of clock in all
			clock.Advance(time.Second)
			ticked.Add(1)
		}
		m.Settle(ctx, "settled", p, 1-int64(i%2)*2)
	})
	churn(func(i int) {
		k := i % keys
		ds, err := m.AllowAll(ctx, []limit.Request{
			{Key: "key-" + strconv.Itoa(k), Policy: p, Cost: 1},
			{Key: "pair-" + strconv.Itoa(i), Policy: p, Cost: 1},
		}, nil)
		if err != nil {
			t.Error(err)
		}
		if limit.Combine(ds).Allowed {
			admitted[k].Add(1)
		}
	})
	spend(t, ctx, m, p, spenders, admitted[:], func(i int) bool { return i < 2000 || ticked.Load() < 200 })
	close(stop)
	bg.Wait()
	for k := range admitted {
		if got := admitted[k].Load(); got != 50 {
			t.Errorf("%s, round %d: key %d admitted %d, want exactly 50", p.Algorithm, round, k, got)
		}
	}
}

// TestMemoryNoLostSpend has 32 goroutines spend on 8 keys of a large
// capacity, with the clock standing still, while AllowAll spends on them
// too (allowed, and denied by an exhausted key), keys are added and reset
// in the same shards and Cleanup runs. Every spend must show in what the
// keys have left.
func TestMemoryNoLostSpend(t *testing.T) {
	ctx := context.Background()
	const limitN, keys, spenders, spends = 1_000_000, 8, 32, 3000
	for _, p := range []limit.Policy{
		limit.TokenBucket(limitN, limit.PerSecond(1)),
		limit.GCRA(limit.PerSecond(1), limitN),
	} {
		clock := limittest.NewClock(limittest.Epoch)
		m := newMemory(t, limit.MemoryOptions{Shards: 2, Clock: clock})
		if _, err := m.AllowN(ctx, "exhausted", p, limitN); err != nil {
			t.Fatal(err)
		}
		var admitted [keys]atomic.Int64
		done := make(chan struct{})
		var bg sync.WaitGroup
		untilClosed(&bg, done, func(i int) { // all-or-nothing spends, allowed and denied
			k := i % keys
			other := "pair-" + strconv.Itoa(i)
			if i%2 == 0 {
				other = "exhausted"
			}
			ds, err := m.AllowAll(ctx, []limit.Request{
				{Key: "key-" + strconv.Itoa(k), Policy: p, Cost: 1}, {Key: other, Policy: p, Cost: 1}}, nil)
			if err != nil {
				t.Error(err)
			}
			if limit.Combine(ds).Allowed {
				admitted[k].Add(1)
			}
		})
		untilClosed(&bg, done, func(i int) { // new keys in the same shards, then gone
			k := "filler-" + strconv.Itoa(i)
			m.AllowN(ctx, k, p, 1)
			m.Reset(ctx, k, p)
		})
		untilClosed(&bg, done, func(int) { m.Cleanup() })
		spend(t, ctx, m, p, spenders, admitted[:], func(i int) bool { return i < spends })
		close(done)
		bg.Wait()
		for k := range admitted {
			d, err := m.AllowN(ctx, "key-"+strconv.Itoa(k), p, 0)
			if err != nil {
				t.Fatal(err)
			}
			if want := limitN - admitted[k].Load(); d.Remaining != want {
				t.Errorf("%s: key %d has %d left after %d admitted, want %d", p.Algorithm, k, d.Remaining, admitted[k].Load(), want)
			}
		}
	}
}

// untilClosed runs f(0), f(1), ... on a goroutine counted in wg until stop
// is closed.
func untilClosed(wg *sync.WaitGroup, stop <-chan struct{}, f func(i int)) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
				f(i)
			}
		}
	}()
}

// spend runs spenders goroutines that each spend 1 on "key-<k>" for the k
// of admitted in turn, while more(i) holds, counting each admitted spend,
// and waits for them.
func spend(t *testing.T, ctx context.Context, m *limit.Memory, p limit.Policy, spenders int, admitted []atomic.Int64, more func(i int) bool) {
	var wg sync.WaitGroup
	for g := 0; g < spenders; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; more(i); i++ {
				k := (g + i) % len(admitted)
				d, err := m.AllowN(ctx, "key-"+strconv.Itoa(k), p, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted[k].Add(1)
				}
			}
		}()
	}
	wg.Wait()
}
