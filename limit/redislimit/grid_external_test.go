package redislimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/limit/redislimit"
)

// TestLendOnGridGrantsWhatWasFreeAtThePoint: on a take grid (200 ms at
// 1,000/s) a take gets what was free at the grid's last point, even after
// another holder's report, dated after the point, has moved the state's
// time: nothing refilled since the point until the next point, which is
// the retry time it is given.
func TestLendOnGridGrantsWhatWasFreeAtThePoint(t *testing.T) {
	for _, p := range []limit.Policy{
		limit.TokenBucket(1000, limit.PerSecond(1000)).Named("tb"),
		limit.GCRA(limit.PerSecond(1000), 1000).Named("gcra"),
	} {
		t.Run(p.Name, func(t *testing.T) {
			takeOn := gridTakes(t, p, 10*time.Second)
			take := func(at int, holder string, seq, used int64, spentAt int, want int64) redislimit.Lease {
				t.Helper()
				return takeOn("k", at, holder, seq, used, spentAt, want)
			}
			a := take(0, "a", 0, 0, -1, 1000)
			if a.Granted != 1000 {
				t.Fatalf("a took %d of a full bucket, want 1000", a.Granted)
			}
			// All spent at 100 ms: the bucket refills from there.
			take(100, "a", a.Seq, 1000, 100, 0)
			// At 250 ms the last point is 200 ms: 100 units.
			c := take(250, "c", 0, 0, -1, 1000)
			if c.Granted != 100 {
				t.Fatalf("c took %d at 250 ms, want the 100 refilled by the point at 200 ms", c.Granted)
			}
			// c's spends, reported at 260 ms and dated 255 ms, move the
			// state's time past the point.
			take(260, "c", c.Seq, 100, 255, 0)
			b := take(270, "b", 0, 0, -1, 1000)
			if b.Granted != 0 || b.Retry != 130*time.Millisecond {
				t.Fatalf("b at 270 ms: granted %d, retry %v; want 0 (the point's refill is c's) and 130ms (the next point)",
					b.Granted, b.Retry)
			}
			// At the next point: the refill from 100 ms to 400 ms, less c's.
			if b = take(410, "b", 0, 0, -1, 1000); b.Granted != 200 {
				t.Fatalf("b at 410 ms: granted %d, want 200", b.Granted)
			}
		})
	}
}

// TestLendOnStateFromAnotherClock: a token bucket state dated far past
// the store's clock (another store's clock, or a state written by hand)
// is read at its own time, and the script answers at once: no integer
// division runs out of a double's precision and loops (which would hold
// Redis busy for every client).
func TestLendOnStateFromAnotherClock(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	clock := limittest.NewClock(limittest.Epoch)
	s, err := redislimit.New(srv.Client(t), redislimit.Options{Prefix: "skew:", Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	p := limit.TokenBucket(1000, limit.PerSecond(1000)).Named("tb")
	for _, at := range []string{"100000000000000000000", "9007199254740993"} {
		if err := srv.Client(t).Set(ctx, s.Key("k", p), "5 "+at, 0).Err(); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		l, err := s.LendOnGridForTest(cctx, "k", p, "a", 0, 0, -1, 10, time.Second)
		cancel()
		if err != nil {
			t.Fatalf("state dated %s: %v", at, err)
		}
		if l.Granted != 10 {
			t.Fatalf("state dated %s: granted %d, want the 10 asked for (5 of 1000 spent then)", at, l.Granted)
		}
	}
}

// TestLendOnGridLeavesAWaitingHolderItsShare: on a take grid, a holder
// that asked and was granted nothing stays counted among the key's
// holders until the next point, so the two that reach the point before it
// leave it its share of the point's refill instead of halving it between
// them. Without that, a store that comes last at the points (its renewal
// goroutine's tick falls after the others') was refused at every point
// while the others took the key's whole rate. The count ends a lease and
// a grid step after the ask.
func TestLendOnGridLeavesAWaitingHolderItsShare(t *testing.T) {
	for _, p := range []limit.Policy{
		limit.TokenBucket(1000, limit.PerSecond(1000)).Named("tb"),
		limit.GCRA(limit.PerSecond(1000), 1000).Named("gcra"),
	} {
		t.Run(p.Name, func(t *testing.T) {
			takeOn := gridTakes(t, p, time.Second)
			// take asks for 1,000 at at ms, reporting used units spent at
			// the grid point before the last (the state then has a
			// point's refill free at every point).
			take := func(key string, at int, holder string, seq, used int64) redislimit.Lease {
				t.Helper()
				return takeOn(key, at, holder, seq, used, max(at/200*200-200, 0), 1000)
			}
			// a takes the full bucket; b and c, asking after it, get
			// nothing and wait for the point at 200 ms.
			a := take("k", 0, "a", 0, 0)
			b := take("k", 5, "b", 0, 0)
			c := take("k", 10, "c", 0, 0)
			if a.Granted != 1000 || b.Granted != 0 || c.Granted != 0 {
				t.Fatalf("a, b and c took %d, %d and %d of a full bucket, want 1000, 0 and 0", a.Granted, b.Granted, c.Granted)
			}
			if c.Holders != 3 {
				t.Fatalf("c at 10 ms: %d holders, want 3 (a holding, b and c waiting)", c.Holders)
			}
			// At the point a reports its spends and each asks again, c
			// last: 200 units refilled, a share of 67 each.
			var got [3]int64
			for i, h := range []struct {
				name      string
				seq, used int64
			}{{"a", a.Seq, a.Granted}, {"b", b.Seq, b.Granted}, {"c", 0, 0}} {
				l := take("k", 200+i, h.name, h.seq, h.used)
				got[i] = l.Granted
			}
			if got != [3]int64{67, 67, 66} {
				t.Fatalf("the point's refill went %v to a, b and c; want [67 67 66]", got)
			}

			// A waiting holder that does not come back stops counting a
			// lease and a grid step after its ask (1,210 ms here).
			a = take("k2", 0, "a", 0, 0)
			b = take("k2", 5, "b", 0, 0)
			take("k2", 10, "c", 0, 0)
			for at := 200; at <= 1400; at += 200 {
				a = take("k2", at, "a", a.Seq, a.Granted)
				b = take("k2", at+1, "b", b.Seq, b.Granted)
				want := int64(3)
				if at > 1210 {
					want = 2
				}
				if a.Holders != want {
					t.Fatalf("a at %d ms: %d holders, want %d", at, a.Holders, want)
				}
			}
		})
	}
}

// gridTakes returns take, which runs the allowance script on p's take grid
// on a store of its own, whose fake clock starts at a point of every grid:
// it moves the clock to at ms, reports used units of holder's lease seq
// spent at spentAt ms (-1: now) and asks for want on key.
func gridTakes(t *testing.T, p limit.Policy, leaseFor time.Duration) func(key string, at int, holder string, seq, used int64, spentAt int, want int64) redislimit.Lease {
	t0 := time.Unix(1_700_000_000, 0)
	clock := limittest.NewClock(t0)
	s := lendStores(t, clock, 1)[0]
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	return func(key string, at int, holder string, seq, used int64, spentAt int, want int64) redislimit.Lease {
		t.Helper()
		clock.Advance(ms(at).Sub(clock.Now()))
		sp := int64(-1)
		if spentAt >= 0 {
			sp = ms(spentAt).UnixMicro()
		}
		l, err := s.LendOnGridForTest(context.Background(), key, p, holder, seq, used, sp, want, leaseFor)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}
