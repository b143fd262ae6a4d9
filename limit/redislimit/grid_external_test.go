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
	ctx := context.Background()
	for _, p := range []limit.Policy{
		limit.TokenBucket(1000, limit.PerSecond(1000)).Named("tb"),
		limit.GCRA(limit.PerSecond(1000), 1000).Named("gcra"),
	} {
		t.Run(p.Name, func(t *testing.T) {
			t0 := time.Unix(1_700_000_000, 0) // a point of every grid
			clock := limittest.NewClock(t0)
			s := lendStores(t, clock, 1)[0]
			const leaseFor = 10 * time.Second
			ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
			take := func(at int, holder string, seq, used int64, spentAt int, want int64) redislimit.Lease {
				t.Helper()
				clock.Advance(ms(at).Sub(clock.Now()))
				sp := int64(-1)
				if spentAt >= 0 {
					sp = ms(spentAt).UnixMicro()
				}
				l, err := s.LendOnGridForTest(ctx, "k", p, holder, seq, used, sp, want, leaseFor)
				if err != nil {
					t.Fatal(err)
				}
				return l
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
