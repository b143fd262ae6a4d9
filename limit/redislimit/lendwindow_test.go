package redislimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/limit/redislimit"
)

// windowPolicies are the window algorithms allowances hold: a limit of 10
// per second.
var windowPolicies = []limit.Policy{
	limit.FixedWindow(10, time.Second).Named("fw"),
	limit.SlidingWindow(10, time.Second).Named("sw"),
}

// windowStart is the start of a one-second window.
var windowStart = time.Unix(1_700_000_000, 0)

// windowTake returns a store on a clock at start and the lease of holder
// "a" on key "k" under p after its take of want for lease.
func windowTake(t *testing.T, start time.Time, p limit.Policy, want int64, lease time.Duration) (*limittest.Clock, *redislimit.Store, redislimit.Lease) {
	t.Helper()
	clock := limittest.NewClock(start)
	s := lendStores(t, clock, 1)[0]
	a, err := s.LendForTest(context.Background(), "k", p, "a", false, 0, 0, -1, want, lease)
	if err != nil {
		t.Fatal(err)
	}
	return clock, s, a
}

// oneTrip decides cost on key from s on the one-trip path: AllowAll with
// one request, or AllowN (the store has no allowances).
func oneTrip(t *testing.T, s limit.Store, key string, p limit.Policy, cost int64, all bool) bool {
	t.Helper()
	ctx := context.Background()
	if all {
		out, err := s.AllowAll(ctx, []limit.Request{{Key: key, Policy: p, Cost: cost}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out[0].Allowed
	}
	dec, err := s.AllowN(ctx, key, p, cost)
	if err != nil {
		t.Fatal(err)
	}
	return dec.Allowed
}

// TestLendWindowCountsAtOnce: a window's grant is in its count at once, the
// one-trip paths (the batched script for the fixed window, the general one
// for both) see it and keep the ledger, and a return gives back the unspent
// part while the window lasts.
func TestLendWindowCountsAtOnce(t *testing.T) {
	ctx := context.Background()
	for _, p := range windowPolicies {
		t.Run(p.Name, func(t *testing.T) {
			clock, s, a := windowTake(t, windowStart, p, 6, time.Hour)
			if a.Granted != 6 || a.Remaining != 4 || a.Holders != 1 || a.LeaseFor != time.Second {
				t.Fatalf("take: %+v, want 6 granted, 4 remaining, a lease cut to the window's end (1s)", a)
			}
			clock.Advance(100 * time.Millisecond)
			if oneTrip(t, s, "k", p, 5, false) || oneTrip(t, s, "k", p, 5, true) {
				t.Fatal("5 allowed with 6 of 10 lent")
			}
			if !oneTrip(t, s, "k", p, 1, false) || !oneTrip(t, s, "k", p, 1, true) {
				t.Fatal("1 and 1 refused with 6 of 10 lent")
			}
			// a spent 2 of its 6 and gives the rest back: the ledger came
			// through the one-trip writes, so 4 come off the count.
			r, err := s.LendForTest(ctx, "k", p, "a", true, a.Seq, 2, -1, 0, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if r.Remaining != 6 || r.Holders != 0 {
				t.Fatalf("return: %+v, want 6 remaining (10 - 2 spent - 2 one-trip), no holder", r)
			}
			if oneTrip(t, s, "k", p, 7, false) || !oneTrip(t, s, "k", p, 6, true) {
				t.Fatal("after the return, want exactly 6 left")
			}
		})
	}
}

// TestLendWindowForfeitAtWindowEnd: units lent and not given back before
// the window ends are forfeit: the next window is not charged for them
// (fixed) or weighs them as the previous window's count (sliding), and a
// late return or renewal of the old lease credits nothing.
func TestLendWindowForfeitAtWindowEnd(t *testing.T) {
	ctx := context.Background()
	for _, p := range windowPolicies {
		t.Run(p.Name, func(t *testing.T) {
			clock, s, a := windowTake(t, windowStart.Add(600*time.Millisecond), p, 10, time.Hour)
			if a.Granted != 10 || a.LeaseFor != 400*time.Millisecond {
				t.Fatalf("take: %+v, want 10 granted for the 400ms left in the window", a)
			}
			clock.Advance(400 * time.Millisecond) // the next window
			// Past its local deadline a holder reports nothing more (its
			// spends are in the lease's count).
			r, err := s.LendForTest(ctx, "k", p, "a", true, a.Seq, 0, -1, 0, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			want := int64(10) // fixed: a new window
			if p.Algorithm == limit.SlidingWindowAlgorithm {
				want = 0 // the 10 weigh fully at the start of the next window
			}
			if r.Remaining != want || r.Holders != 0 {
				t.Fatalf("late return: %+v, want %d remaining, no holder", r, want)
			}
			if p.Algorithm == limit.SlidingWindowAlgorithm {
				clock.Advance(500 * time.Millisecond) // half the previous count weighs: 5
				if oneTrip(t, s, "k", p, 6, true) || !oneTrip(t, s, "k", p, 5, true) {
					t.Fatal("half-way into the next window: want exactly 5")
				}
				return
			}
			if oneTrip(t, s, "k", p, 11, true) || !oneTrip(t, s, "k", p, 10, true) {
				t.Fatal("next fixed window: want exactly 10")
			}
		})
	}
}

// TestLendWindowExpiredLeaseStaysCounted: a lease that ends inside its
// window (a dead or frozen holder) leaves the ledger with its units still
// counted; its late return credits nothing, and its holder's next take
// opens a new lease.
func TestLendWindowExpiredLeaseStaysCounted(t *testing.T) {
	ctx := context.Background()
	for _, p := range windowPolicies {
		t.Run(p.Name, func(t *testing.T) {
			clock, s, a := windowTake(t, windowStart, p, 5, lease)
			clock.Advance(lease)
			r, err := s.LendForTest(ctx, "k", p, "a", true, a.Seq, 0, -1, 0, lease)
			if err != nil {
				t.Fatal(err)
			}
			if r.Remaining != 5 || r.Holders != 0 {
				t.Fatalf("late return: %+v, want the 5 still counted and no holder", r)
			}
			b, err := s.LendForTest(ctx, "k", p, "a", false, a.Seq, 0, -1, 10, lease)
			if err != nil {
				t.Fatal(err)
			}
			if b.Granted != 5 || b.Seq == a.Seq || b.Holders != 1 {
				t.Fatalf("stale renewal: %+v, want 5 granted under a new lease", b)
			}
		})
	}
}

// TestLendWindowResetAndSettleKeepLentUnits: Reset forgets the window's
// count but not what is lent, and a refund never takes the count below it.
func TestLendWindowResetAndSettleKeepLentUnits(t *testing.T) {
	ctx := context.Background()
	for _, p := range windowPolicies {
		t.Run(p.Name, func(t *testing.T) {
			_, s, a := windowTake(t, windowStart, p, 4, time.Hour)
			if !oneTrip(t, s, "k", p, 5, true) {
				t.Fatal("5 refused with 4 of 10 lent")
			}
			if err := s.Reset(ctx, "k", p); err != nil {
				t.Fatal(err)
			}
			if oneTrip(t, s, "k", p, 7, true) || !oneTrip(t, s, "k", p, 6, false) {
				t.Fatal("after Reset: want the 4 lent still counted, 6 left")
			}
			dec, err := s.Settle(ctx, "k", p, -100)
			if err != nil {
				t.Fatal(err)
			}
			if dec.Remaining != 6 {
				t.Fatalf("after a refund of 100: %+v, want 6 remaining (the 4 lent stay counted)", dec)
			}
			// The ledger survived both: a's return gives its 4 back.
			if _, err := s.LendForTest(ctx, "k", p, "a", true, a.Seq, 0, -1, 0, time.Hour); err != nil {
				t.Fatal(err)
			}
			if oneTrip(t, s, "k", p, 11, true) || !oneTrip(t, s, "k", p, 10, true) {
				t.Fatal("after a's return: want all 10 back")
			}
		})
	}
}

// TestLendStaleReportIsCharged: a report on a lease the state does not
// hold (Redis restarted empty, or the answer to a renewal was lost) is
// charged at once: the new state knows what the holder spent from units it
// took before.
func TestLendStaleReportIsCharged(t *testing.T) {
	ctx := context.Background()
	for _, p := range append(append([]limit.Policy(nil), lendPolicies...), windowPolicies...) {
		t.Run(p.Name, func(t *testing.T) {
			s := lendStores(t, limittest.NewClock(windowStart), 1)[0]
			r, err := s.LendForTest(ctx, "k", p, "a", false, 12345, 3, -1, 2, lease)
			if err != nil {
				t.Fatal(err)
			}
			if r.Granted != 2 || r.Remaining != 5 || r.Matched {
				t.Fatalf("stale report of 3: %+v, want 2 granted and 10 - 3 - 2 = 5 remaining, not matched", r)
			}
		})
	}
}

// TestLendWindowStaleReportOfAnEarlierWindow: a report on a lease the
// state does not hold whose spends were all made before the window began
// is not counted in it.
func TestLendWindowStaleReportOfAnEarlierWindow(t *testing.T) {
	ctx := context.Background()
	for _, p := range windowPolicies {
		t.Run(p.Name, func(t *testing.T) {
			s := lendStores(t, limittest.NewClock(windowStart.Add(time.Second)), 1)[0]
			before := windowStart.Add(900 * time.Millisecond).UnixMicro()
			r, err := s.LendForTest(ctx, "k", p, "a", false, 12345, 3, before, 2, lease)
			if err != nil {
				t.Fatal(err)
			}
			if r.Granted != 2 || r.Remaining != 8 {
				t.Fatalf("stale report of 3 spent in the last window: %+v, want 2 granted and 8 remaining", r)
			}
		})
	}
}

// TestLendWindowNeedAndHeld: a renewal that says what the holder still has
// cuts its lease to that and gives the rest back; one whose decision the
// remainder and the window cannot meet gives the remainder back, grants
// nothing and answers when the cost would fit.
func TestLendWindowNeedAndHeld(t *testing.T) {
	ctx := context.Background()
	for _, p := range windowPolicies {
		t.Run(p.Name, func(t *testing.T) {
			s := lendStores(t, limittest.NewClock(windowStart), 1)[0]
			a, err := s.LendWindowForTest(ctx, "k", p, "a", 0, 0, 6, 0, -1, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			// 1 spent, 2 kept of the other 5: 3 go back, 2 more granted.
			r, err := s.LendWindowForTest(ctx, "k", p, "a", a.Seq, 1, 2, 0, 2, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Matched || r.Granted != 2 || r.Remaining != 5 {
				t.Fatalf("renewal holding 2: %+v, want 2 granted and 10 - 1 - 2 - 2 = 5 remaining", r)
			}
			b, err := s.LendWindowForTest(ctx, "k", p, "b", 0, 0, 5, 0, -1, time.Hour)
			if err != nil || b.Granted != 5 {
				t.Fatalf("b's take: %+v %v, want the 5 left", b, err)
			}
			// a holds 4 and needs 6: the window has nothing more.
			r, err = s.LendWindowForTest(ctx, "k", p, "a", r.Seq, 0, 0, 6, 4, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if r.Granted != 0 || r.Seq != 0 || r.Retry <= 0 || r.Remaining != 4 || r.Holders != 1 {
				t.Fatalf("unmet need: %+v, want nothing granted, a's 4 back, a retry time", r)
			}
		})
	}
}

// TestLendWindowRenewalAskingNothing: a renewal that reports spends and
// asks for no more units (the holder already holds its target) keeps the
// lease, under a new seq, with what is left of it: the holder goes on
// spending those units, and a return gives them back to the window. The
// window script once answered such a call with no lease, so the holder
// dropped its remainder while the window still counted it lent: units lost
// for the rest of the window (9 of 56 a window in a saturated 3-store run).
func TestLendWindowRenewalAskingNothing(t *testing.T) {
	ctx := context.Background()
	for _, p := range windowPolicies {
		t.Run(p.Name, func(t *testing.T) {
			clock, s, a := windowTake(t, windowStart, p, 6, time.Hour)
			if a.Granted != 6 {
				t.Fatalf("take: %+v, want 6 granted", a)
			}
			clock.Advance(100 * time.Millisecond)
			r, err := s.LendForTest(ctx, "k", p, "a", false, a.Seq, 2, -1, 0, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Matched || r.Seq == 0 || r.Seq == a.Seq || r.Granted != 0 || r.Holders != 1 || r.Remaining != 4 {
				t.Fatalf("renewal asking nothing: %+v; want the lease kept under a new seq, 4 still lent, 4 free", r)
			}
			// a spends 1 more and gives back the other 3.
			g, err := s.LendForTest(ctx, "k", p, "a", true, r.Seq, 1, -1, 0, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if !g.Matched || g.Remaining != 7 || g.Holders != 0 {
				t.Fatalf("return: %+v; want the 3 unspent back (7 free: 10 - 3 spent), no holder", g)
			}
		})
	}
}
