package redislimit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
)

// TestAllowanceWindowsExactAcrossStores: three stores, eight callers each,
// decide one key at several times its limit while a fake clock steps
// through windows; every admission is logged with its step. For the fixed
// window no window admits more than the limit; for the sliding window the
// estimate, with the real admissions, stays within the limit at every
// step. Exactly, no tolerance.
func TestAllowanceWindowsExactAcrossStores(t *testing.T) {
	const (
		window = time.Second
		step   = 250 * time.Millisecond
		steps  = 16 // four windows
		limitN = 200
	)
	for _, p := range []limit.Policy{
		limit.FixedWindow(limitN, window).Named("fw"),
		limit.SlidingWindow(limitN, window).Named("sw"),
	} {
		t.Run(p.Name, func(t *testing.T) {
			clock := limittest.NewClock(windowStart)
			stores := allowanceStores(t, clock, 3)
			for _, s := range stores {
				s.MakeHotForTest("hot", p)
			}
			perStep := make([]int64, steps)
			var decided int64
			for i := range steps {
				var admitted atomic.Int64
				var wg sync.WaitGroup
				errc := make(chan error, 24)
				for _, s := range stores {
					for range 8 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for range 25 {
								dec, err := s.AllowN(context.Background(), "hot", p, 1)
								if err != nil {
									errc <- err
									return
								}
								if dec.Allowed {
									admitted.Add(1)
								}
							}
						}()
					}
				}
				wg.Wait()
				close(errc)
				for err := range errc {
					t.Fatal(err)
				}
				perStep[i] = admitted.Load()
				decided += 3 * 8 * 25
				clock.Advance(step)
			}
			per := int(window / step)
			var windows []int64
			for k := 0; k*per < steps; k++ {
				var sum int64
				for _, n := range perStep[k*per : (k+1)*per] {
					sum += n
				}
				windows = append(windows, sum)
				if sum > limitN {
					t.Fatalf("window %d admitted %d (steps %v), over the limit %d", k, sum, perStep, limitN)
				}
			}
			if p.Algorithm == limit.SlidingWindowAlgorithm {
				w := int64(window / time.Microsecond)
				for i := range steps {
					k, e := i/per, int64(time.Duration(i%per)*step/time.Microsecond)
					var cur, prev int64
					for _, n := range perStep[k*per : i+1] {
						cur += n
					}
					if k > 0 {
						prev = windows[k-1]
					}
					if prev*(w-e)+cur*w > limitN*w {
						t.Fatalf("step %d: %d in the window, %d in the previous one, %v in: estimate over the limit %d",
							i, cur, prev, time.Duration(e)*time.Microsecond, limitN)
					}
				}
			}
			t.Logf("%s: %d decisions, admitted per window %v (limit %d), per step %v", p.Name, decided, windows,
				limitN, perStep)
		})
	}
}

// TestAllowanceWindowEndStaysLocal: a store denied on a window key until
// the window's end refuses locally through the window's last stretch (too
// short for a lease), instead of sending each of those decisions to Redis.
func TestAllowanceWindowEndStaysLocal(t *testing.T) {
	for _, p := range []limit.Policy{
		limit.FixedWindow(100, 10*time.Second).Named("fw"),
		limit.SlidingWindow(100, 10*time.Second).Named("sw"),
	} {
		t.Run(p.Name, func(t *testing.T) {
			start := windowStart.Truncate(10 * time.Second)
			clock := limittest.NewClock(start)
			s := allowanceStores(t, clock, 1)[0]
			s.MakeHotForTest("k", p) // drainN's key
			if got := drainN(t, s, p, 2*p.Limit); got != p.Limit {
				t.Fatalf("%d admitted in a fresh window, want the limit %d", got, p.Limit)
			}
			if st := s.AllowanceStats(); st.Lent == 0 {
				t.Fatalf("nothing lent: %+v", st)
			}
			clock.Set(start.Add(10*time.Second - 100*time.Millisecond))
			before := s.AllowanceStats()
			if got := drainN(t, s, p, 200); got != 0 {
				t.Fatalf("%d admitted in the spent window's last 100 ms", got)
			}
			after := s.AllowanceStats()
			if remote, calls := after.Remote-before.Remote, after.Commands-before.Commands; remote != 0 || calls > 1 {
				t.Fatalf("200 decisions in the window's last 100 ms: %d one-trip, %d script calls; want 0 and at most 1", remote, calls)
			}
		})
	}
}
