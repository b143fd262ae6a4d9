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

// evictPolicies are one active policy per algorithm, whose keys stay away
// from rest for an hour after spending 5.
func evictPolicies() []limit.Policy {
	return []limit.Policy{
		limit.TokenBucket(10, limit.PerHour(1)).Named("tb"),
		limit.GCRA(limit.PerHour(1), 10).Named("gcra"),
		limit.FixedWindow(10, 24*time.Hour).Named("fixed"),
		limit.RollingWindow(10, time.Hour).Named("rolling"),
		limit.SlidingWindow(10, time.Hour).Named("sliding"),
	}
}

// TestEvictAtRestFirst fills a memory store with active keys and one key
// back at rest, of another policy and so in another table and shard, and
// adds a key: the key at rest goes, losslessly, and every active key keeps
// what it spent. Then, with only active keys left, a new key evicts the
// one that spent least, and the eviction is counted.
func TestEvictAtRestFirst(t *testing.T) {
	ctx := context.Background()
	for _, p := range evictPolicies() {
		for _, whenFull := range []limit.FullPolicy{limit.EvictLRU, limit.RefuseNewKeys} {
			t.Run(p.Name+"/"+strconv.Itoa(int(whenFull)), func(t *testing.T) {
				clock := limittest.NewClock(limittest.Epoch)
				m := newMemory(t, limit.MemoryOptions{Shards: 16, MaxKeys: 64, WhenFull: whenFull, Clock: clock})
				quick := limit.TokenBucket(1, limit.PerSecond(1)).Named("quick")
				if d, err := m.AllowN(ctx, "resting", quick, 1); err != nil || !d.Allowed {
					t.Fatalf("resting key: %+v %v", d, err)
				}
				for i := 0; i < 63; i++ {
					if d, err := m.AllowN(ctx, strconv.Itoa(i), p, 5+int64(i%2)); err != nil || !d.Allowed {
						t.Fatalf("key %d: %+v %v", i, d, err)
					}
				}
				clock.Advance(time.Second) // "resting" is back at rest; the others are not
				for i := 0; i < 3; i++ {   // room for each new key once "resting" is gone
					d, err := m.AllowN(ctx, "new"+strconv.Itoa(i), p, 6)
					if i == 0 && (err != nil || !d.Allowed) {
						t.Fatalf("a new key with a key at rest in the store: %+v %v", d, err)
					}
					if i == 0 {
						if st := m.Stats(); st.Keys != 64 || st.Cleaned != 1 || st.Evicted != 0 {
							t.Fatalf("stats after the first new key %+v: want the key at rest cleaned, nothing evicted", st)
						}
						for k := 0; k < 63; k++ {
							d, _ := m.AllowN(ctx, strconv.Itoa(k), p, 0)
							if want := 10 - 5 - int64(k%2); d.Remaining != want {
								t.Fatalf("active key %d lost what it spent: %+v, want %d remaining", k, d, want)
							}
						}
						continue
					}
					st := m.Stats()
					if whenFull == limit.RefuseNewKeys {
						if err == nil || st.Evicted != 0 || st.Refused != int64(i) {
							t.Fatalf("new key %d when only active keys are left: %+v %v, stats %+v", i, d, err, st)
						}
						continue
					}
					if err != nil || !d.Allowed || st.Evicted != int64(i) || st.Keys != 64 {
						t.Fatalf("new key %d when only active keys are left: %+v %v, stats %+v", i, d, err, st)
					}
				}
				if whenFull == limit.EvictLRU {
					// Each lossy eviction forgot one key, no more.
					lost := 0
					for k := 0; k < 63; k++ {
						if d, _ := m.AllowN(ctx, strconv.Itoa(k), p, 0); d.Remaining == 10 {
							lost++
						}
					}
					for k := 0; k < 2; k++ {
						if d, _ := m.AllowN(ctx, "new"+strconv.Itoa(k), p, 0); d.Remaining == 10 {
							lost++
						}
					}
					if lost != 2 {
						t.Fatalf("%d keys lost what they spent after 2 lossy evictions", lost)
					}
				}
			})
		}
	}
}

// TestEvictLeastSpent fills a one-shard store with keys that spent 1 to 8
// and adds one: of the sample, which here is every key, the one that spent
// least is evicted, for every algorithm.
func TestEvictLeastSpent(t *testing.T) {
	ctx := context.Background()
	for _, p := range evictPolicies() {
		clock := limittest.NewClock(limittest.Epoch)
		m := newMemory(t, limit.MemoryOptions{Shards: 1, MaxKeys: 8, Clock: clock})
		spent := []int64{4, 7, 2, 8, 1, 5, 3, 6} // key 4 spent least
		for k, c := range spent {
			if d, err := m.AllowN(ctx, strconv.Itoa(k), p, c); err != nil || !d.Allowed {
				t.Fatalf("%s key %d: %+v %v", p.Name, k, d, err)
			}
		}
		clock.Advance(time.Second)
		if d, err := m.AllowN(ctx, "new", p, 1); err != nil || !d.Allowed {
			t.Fatalf("%s: new key: %+v %v", p.Name, d, err)
		}
		for k, c := range spent {
			d, _ := m.AllowN(ctx, strconv.Itoa(k), p, 0)
			if evicted := d.Remaining == 10; evicted != (k == 4) {
				t.Errorf("%s: key %d, which spent %d: %+v", p.Name, k, c, d)
			}
		}
		if st := m.Stats(); st.Evicted != 1 || st.Keys != 8 {
			t.Errorf("%s: stats %+v", p.Name, st)
		}
	}
}

// TestEvictFloodKeepsVictim floods a memory store with new keys, 1.8 times
// its MaxKeys per second, each spending once, as in a scan of random user
// IDs, while one key calls every 10 ms under a limit of 30 per 20 s. The
// victim must admit exactly what it admits in a store of its own.
func TestEvictFloodKeepsVictim(t *testing.T) {
	const maxKeys, perSecond = 512, 922 // 65,536 and 118,000 scaled by 1/128
	ctx := context.Background()
	for _, p := range []limit.Policy{
		limit.TokenBucket(30, limit.Rate{Count: 30, Period: 20 * time.Second}).Named("tb"),
		limit.GCRA(limit.Rate{Count: 30, Period: 20 * time.Second}, 30).Named("gcra"),
		limit.FixedWindow(30, 20*time.Second).Named("fixed"),
		limit.RollingWindow(30, 20*time.Second).Named("rolling"),
		limit.SlidingWindow(30, 20*time.Second).Named("sliding"),
	} {
		t.Run(p.Name, func(t *testing.T) {
			clock := limittest.NewClock(limittest.Epoch)
			m := newMemory(t, limit.MemoryOptions{MaxKeys: maxKeys, Clock: clock})
			alone := newMemory(t, limit.MemoryOptions{Clock: clock})
			step := time.Second / perSecond
			flood, got, want := 0, 0, 0
			for at := time.Duration(0); at < 25*time.Second; at += 10 * time.Millisecond {
				for ; time.Duration(flood)*step < at; flood++ {
					clock.Set(limittest.Epoch.Add(time.Duration(flood) * step))
					if _, err := m.AllowN(ctx, "flood-"+strconv.Itoa(flood), p, 1); err != nil {
						t.Fatalf("flood key %d: %v", flood, err)
					}
				}
				clock.Set(limittest.Epoch.Add(at))
				d, err := m.AllowN(ctx, "victim", p, 1)
				if err != nil {
					t.Fatal(err)
				}
				ref, _ := alone.AllowN(ctx, "victim", p, 1)
				if d.Allowed {
					got++
				}
				if ref.Allowed {
					want++
				}
				if d.Allowed != ref.Allowed {
					t.Fatalf("at %v, after %d flood keys: the victim got %+v, alone %+v (admitted %d, alone %d); stats %+v",
						at, flood, d, ref, got, want, m.Stats())
				}
			}
			t.Logf("%d flood keys; victim admitted %d as alone; stats %+v", flood, got, m.Stats())
		})
	}
}

// TestEvictConcurrentAccounting has goroutines decide, settle and decide
// together on many keys of several policies in a store far smaller than
// they need, so that keys are dropped at rest and evicted all the time,
// while the clock moves. Once everything is back at rest, Cleanup must
// drop exactly the keys the store counts: none lost or counted twice.
func TestEvictConcurrentAccounting(t *testing.T) {
	clock := limittest.NewClock(limittest.Epoch)
	m := newMemory(t, limit.MemoryOptions{Shards: 4, MaxKeys: 64, Clock: clock})
	policies := []limit.Policy{
		limit.TokenBucket(5, limit.PerSecond(50)).Named("tb"),
		limit.FixedWindow(5, 100*time.Millisecond).Named("fixed"),
		limit.RollingWindow(5, 100*time.Millisecond).Named("rolling"),
		limit.SlidingWindow(5, 100*time.Millisecond).Named("sliding"),
	}
	ctx := context.Background()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 2000; i++ {
			clock.Advance(time.Millisecond)
		}
	}()
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		go func(g int) {
			var err error
			for i := 0; i < 1500 && err == nil; i++ {
				k := strconv.Itoa((g*7 + i*13) % 200)
				p := policies[(g+i)%len(policies)]
				switch i % 5 {
				case 0:
					_, err = m.Settle(ctx, k, p, 2)
				case 1:
					_, err = m.AllowAll(ctx, []limit.Request{{Key: k, Policy: p, Cost: 1},
						{Key: k + "x", Policy: policies[(g+i+1)%len(policies)], Cost: 1}}, nil)
				default:
					_, err = m.AllowN(ctx, k, p, 1)
				}
				if errors.Is(err, limit.ErrTooManyKeys) {
					err = nil
				}
			}
			errs <- err
		}(g)
	}
	for g := 0; g < 8; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	<-done
	before := m.Stats()
	clock.Advance(time.Hour)
	dropped := m.Cleanup()
	if st := m.Stats(); int64(dropped) != before.Keys || st.Keys != 0 || before.Keys > 64 {
		t.Fatalf("the store counted %d keys, Cleanup dropped %d, %d left (stats %+v)", before.Keys, dropped, st.Keys, st)
	}
	if before.Evicted+before.Cleaned == 0 {
		t.Fatalf("the test made no room: %+v", before)
	}
}

// TestMaxKeysWithKeysAddedTogether: 64 callers add 20,000 fresh keys,
// every one of them spent (none at rest), to a store of 1,000 keys over
// 16 shards: the store never counts more than MaxKeys, however many new
// keys are admitted at once on other shards. With EvictLRU it ends full,
// 19,000 evictions counted; with RefuseNewKeys exactly 1,000 keys were
// admitted and the rest refused.
func TestMaxKeysWithKeysAddedTogether(t *testing.T) {
	const maxKeys, keys = 1000, 20_000
	p := limit.TokenBucket(10, limit.PerHour(1)).Named("tb")
	for _, full := range []limit.FullPolicy{limit.EvictLRU, limit.RefuseNewKeys} {
		t.Run(strconv.Itoa(int(full)), func(t *testing.T) {
			m := newMemory(t, limit.MemoryOptions{Shards: 16, MaxKeys: maxKeys, WhenFull: full,
				Clock: limittest.NewClock(limittest.Epoch)})
			var next, admitted, refused, most atomic.Int64
			var wg sync.WaitGroup
			for range 64 {
				wg.Go(func() {
					for i := next.Add(1); i <= keys; i = next.Add(1) {
						_, err := m.AllowN(context.Background(), "k"+strconv.FormatInt(i, 10), p, 1)
						switch {
						case err == nil:
							admitted.Add(1)
						case errors.Is(err, limit.ErrTooManyKeys):
							refused.Add(1)
						default:
							t.Error(err)
							return
						}
						for n := m.Stats().Keys; n > most.Load(); {
							if most.CompareAndSwap(most.Load(), n) {
								break
							}
						}
					}
				})
			}
			wg.Wait()
			st := m.Stats()
			if most.Load() > maxKeys || st.Keys != maxKeys {
				t.Fatalf("the store counted up to %d keys, %d at the end (stats %+v); want at most and at the end %d",
					most.Load(), st.Keys, st, maxKeys)
			}
			switch full {
			case limit.EvictLRU:
				if admitted.Load() != keys || st.Evicted != keys-maxKeys {
					t.Fatalf("%d keys admitted, %d evicted; want %d, %d", admitted.Load(), st.Evicted, keys, keys-maxKeys)
				}
			case limit.RefuseNewKeys:
				if admitted.Load() != maxKeys || refused.Load() != keys-maxKeys {
					t.Fatalf("%d keys admitted, %d refused; want %d, %d", admitted.Load(), refused.Load(), maxKeys, keys-maxKeys)
				}
			}
		})
	}
}
