package redislimit_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/limit/redislimit"
)

// TestColdLeaseAsksUnderHostileDeadlines: callers that give up at random,
// most within a few milliseconds, on a server frozen (SIGSTOP) again and
// again, so that calls are queued, batched, on the wire and answered
// after their callers left in every order. Three stores, two batched and
// one sending alone, with cold leases, share 64 cold keys (token buckets
// and GCRA) and a hot one (a fixed window). After the run every Close
// returns, no store holds a lease place or a lease, and no key admitted
// more than Redis counts as spent (the fake clock runs ten times as fast
// as real time, half a minute in all: the buckets refill a unit an hour,
// and the window's hour does not end). What callers that left lost is
// only ever counted as spent, never admitted.
func TestColdLeaseAsksUnderHostileDeadlines(t *testing.T) {
	srv := redistest.StartServer(t)
	clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
	p := limit.TokenBucket(300, limit.PerHour(1)).Named("tb")
	gp := limit.GCRA(limit.PerHour(1), 300).Named("gcra") // the odd keys'
	var stores []*redislimit.Store
	for i, maxBatch := range []int{0, 0, 1} {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr()}) // go-redis's defaults
		t.Cleanup(func() { c.Close() })
		s, err := redislimit.New(c, redislimit.Options{Prefix: "h:", LocalAllowance: true,
			AllowanceLease: time.Second, ColdLease: time.Minute, MaxBatch: maxBatch, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		if _, err := s.AllowN(context.Background(), "other"+strconv.Itoa(i), p, 0); err != nil { // a connection made
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	const keys = 64
	// Key keys, "hot", is decided a quarter of the time, under hp: a fixed
	// window, which has no cold leases, it is hot at every store and
	// decided from allowances, whose takes outlive their callers too.
	hp := limit.FixedWindow(5000, time.Hour).Named("hot")
	var admitted [keys + 1]atomic.Int64
	var gaveUp, answered atomic.Int64

	stop := make(chan struct{})
	var background sync.WaitGroup
	background.Go(func() { // freezes of 0–15 ms, 5–20 ms apart
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(5+rng.IntN(15)) * time.Millisecond):
			}
			srv.Freeze(t)
			time.Sleep(time.Duration(rng.IntN(15)) * time.Millisecond)
			srv.Thaw(t)
		}
	})
	background.Go(func() { // the fake clock 10 times as fast as real time: keys warm, leases end
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			clock.Advance(20 * time.Millisecond)
		}
	})
	var callers sync.WaitGroup
	end := time.Now().Add(3 * time.Second)
	for g := range 24 {
		callers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for time.Now().Before(end) {
				k, key, pol := rng.IntN(keys), "", p
				switch {
				case rng.IntN(4) == 0:
					k, pol = keys, hp
				case k%2 == 1:
					pol = gp
				}
				key = keyName(k, keys)
				s := stores[rng.IntN(len(stores))]
				timeout := time.Duration(50+rng.IntN(20_000)) * time.Microsecond
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				dec, err := s.AllowN(ctx, key, pol, 1)
				cancel()
				switch {
				case errors.Is(err, context.DeadlineExceeded):
					gaveUp.Add(1)
				case err != nil:
					t.Errorf("a decision failed otherwise than by its deadline: %v", err)
					return
				default:
					answered.Add(1)
					if dec.Allowed {
						admitted[k].Add(1)
					}
				}
			}
		})
	}
	callers.Wait()
	close(stop)
	background.Wait()
	srv.Thaw(t)
	if gaveUp.Load() == 0 || answered.Load() == 0 {
		t.Fatalf("%d decisions answered and %d given up: the run did not mix the two", answered.Load(), gaveUp.Load())
	}

	var closing sync.WaitGroup
	for i, s := range stores {
		closing.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			done := make(chan struct{})
			go func() { _ = s.Close(ctx); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Errorf("store %d: Close still waiting after 20 s", i)
				return
			}
			if places, held := s.ColdPlacesForTest(); places != 0 || held != 0 {
				t.Errorf("store %d after Close: %d lease places taken and %d leases held, want none", i, places, held)
			}
		})
	}
	closing.Wait()
	total := int64(0)
	for k := range keys + 1 {
		pol := p
		switch {
		case k == keys:
			pol = hp
		case k%2 == 1:
			pol = gp
		}
		n := admitted[k].Load()
		total += n
		free := freeOn(t, srv, "h:", clock, keyName(k, keys), pol)
		if n > pol.Limit-free {
			t.Errorf("key %s: %d admitted, but Redis counts %d spent of %d", keyName(k, keys), n, pol.Limit-free, pol.Limit)
		}
	}
	if st := stores[0].AllowanceStats(); st.Local-st.ColdLocal == 0 {
		t.Errorf("no decision of the first store answered from a hot allowance (%+v): the hot key was not hot", st)
	}
	t.Logf("%d decisions answered (%d admitted), %d given up at their deadline", answered.Load(), total, gaveUp.Load())
}

// keyName is the name of key k of n: "hot" for k == n.
func keyName(k, n int) string {
	if k == n {
		return "hot"
	}
	return "k" + strconv.Itoa(k)
}
