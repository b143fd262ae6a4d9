package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/limit/redislimit"
)

// coldStores is leasedStores with cold leases of cold.
// Once the test is over and each store closed, none holds a lease or a
// place for one against MaxColdLeases.
func coldStores(t *testing.T, clock limit.Clock, n int, lease, cold time.Duration) []*redislimit.Store {
	t.Helper()
	stores := storesWith(t, n, redislimit.Options{Clock: clock, LocalAllowance: true, AllowanceLease: lease, ColdLease: cold})
	t.Cleanup(func() {
		for i, s := range stores {
			_ = s.Close(context.Background())
			if places, held := s.ColdPlacesForTest(); places != 0 || held != 0 {
				t.Errorf("store %d closed with %d places taken and %d cold leases held", i, places, held)
			}
		}
	})
	return stores
}

// oneColdStore is a store on a fake clock with allowances of 1 s and cold
// leases of 1 min.
func oneColdStore(t *testing.T) (*limittest.Clock, *redislimit.Store) {
	t.Helper()
	clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
	return clock, coldStores(t, clock, 1, time.Second, time.Minute)[0]
}

// plainStore is a store without allowances on the prefix of s's keys, to
// read the shared state as the one-trip path sees it.
func plainStore(t *testing.T, clock limit.Clock, s *redislimit.Store) *redislimit.Store {
	t.Helper()
	prefix, _, _ := strings.Cut(s.Key("k", limit.TokenBucket(1, limit.PerSecond(1)).Named("x")), "{")
	p, err := redislimit.New(connect(t), redislimit.Options{Prefix: prefix, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// unrefilled is a token bucket and a GCRA policy of limit n that refill
// next to nothing (1 an hour).
func unrefilled(n int64) []limit.Policy {
	return []limit.Policy{
		limit.TokenBucket(n, limit.PerHour(1)).Named("tb"),
		limit.GCRA(limit.PerHour(1), n).Named("gcra"),
	}
}

// checkFree checks that the state of each key k<i> under p, as a store
// without allowances on s's keys sees it, has exactly p.Limit less
// admitted[i] free and so never admitted over the limit, and returns the
// sum admitted.
func checkFree(t *testing.T, clock limit.Clock, s *redislimit.Store, p limit.Policy, admitted []atomic.Int64) (total int64) {
	t.Helper()
	plain := plainStore(t, clock, s)
	for k := range admitted {
		n := admitted[k].Load()
		total += n
		if n > p.Limit {
			t.Errorf("k%d: %d admitted, over the limit of %d", k, n, p.Limit)
		}
		dec, err := plain.AllowN(context.Background(), "k"+strconv.Itoa(k), p, 0)
		if err != nil {
			t.Fatal(err)
		}
		if dec.Remaining != p.Limit-n {
			t.Errorf("k%d: %d admitted, and after Close the state has %d free, want %d", k, n, dec.Remaining, p.Limit-n)
		}
	}
	return total
}

func TestColdLeaseOptions(t *testing.T) {
	c := connect(t)
	for _, o := range []redislimit.Options{
		{LocalAllowance: true, ColdLease: 500 * time.Millisecond},
		{LocalAllowance: true, ColdLease: 2 * time.Hour},
		{LocalAllowance: true, ColdLease: -time.Second},
		{LocalAllowance: true, ColdLease: time.Minute, MaxColdLeases: -1},
	} {
		_, err := redislimit.New(c, o)
		var oe *limit.OptionError
		if !errors.As(err, &oe) {
			t.Errorf("%+v: got %v, want an *OptionError", o, err)
		}
	}
	if _, err := redislimit.New(c, redislimit.Options{LocalAllowance: true, ColdLease: time.Minute}); err != nil {
		t.Fatal(err)
	}
}

// TestColdLeaseSpendsLocally: a key far from its limit is lent units along
// with its first one-trip decision; the next decisions spend them with no
// call; the decision that leaves a quarter starts a renewal beside it,
// which ends the lease (reporting the spends) and takes a new one in the
// same call; Close reports the rest. The shared state then holds exactly
// the decisions made.
func TestColdLeaseSpendsLocally(t *testing.T) {
	for _, p := range []limit.Policy{
		limit.TokenBucket(1000, limit.PerHour(1)).Named("tb"),
		limit.GCRA(limit.PerHour(1), 1000).Named("gcra"),
	} {
		t.Run(p.Name, func(t *testing.T) {
			clock, s := oneColdStore(t)
			ctx := context.Background()
			const decisions = 30
			for i := range decisions {
				dec, err := s.AllowN(ctx, "k", p, 1)
				if err != nil {
					t.Fatal(err)
				}
				if !dec.Allowed {
					t.Fatalf("decision %d refused: %+v", i, dec)
				}
				clock.Advance(10 * time.Millisecond)
			}
			st := s.AllowanceStats()
			t.Logf("%+v", st)
			// The first lease is 8 units; the decision that leaves 1 starts
			// the renewal (sized from the rate: 100/s over a minute, capped
			// at an eighth of the limit: 125), which the next one waits for.
			if st.Remote != 1 || st.ColdRenewals != 1 || st.ColdLocal != decisions-1 || st.Lent != 8+125 ||
				st.ColdLeases != 1 {
				t.Fatalf("stats %+v: want 1 one-trip decision, 1 early renewal, %d from cold leases, 133 units lent, 1 lease held",
					st, decisions-1)
			}
			if st.Commands != 2 {
				t.Fatalf("%d script calls, want 2", st.Commands)
			}
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
			got, err := plainStore(t, clock, s).AllowN(ctx, "k", p, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got.Remaining != 1000-decisions {
				t.Fatalf("after Close the state has %d free, want %d (the decisions made, nothing lent)", got.Remaining, 1000-decisions)
			}
		})
	}
}

// admitN makes n decisions of cost 1 on "k" at s, each of which must be
// allowed.
func admitN(t *testing.T, s *redislimit.Store, p limit.Policy, n int) {
	t.Helper()
	for i := range n {
		if d, err := s.AllowN(context.Background(), "k", p, 1); err != nil || !d.Allowed {
			t.Fatalf("decision %d: %+v %v", i, d, err)
		}
	}
}

// waitColdRenewals waits for the early renewals s has in flight.
func waitColdRenewals(s *redislimit.Store) {
	for s.ColdRenewalsInFlightForTest() > 0 {
		time.Sleep(50 * time.Microsecond)
	}
}

// spendSteadily makes n decisions on "k" at s, 100 ms apart on clock, each
// of which must be allowed. A renewal's call is answered before the clock
// moves on (it would take milliseconds, not the 100 ms of a step).
func spendSteadily(t *testing.T, clock *limittest.Clock, s *redislimit.Store, p limit.Policy, n int) {
	t.Helper()
	for i := range n {
		if d, err := s.AllowN(context.Background(), "k", p, 1); err != nil || !d.Allowed {
			t.Fatalf("decision %d: %+v %v", i, d, err)
		}
		waitColdRenewals(s)
		clock.Advance(100 * time.Millisecond)
	}
}

// TestColdLeaseRenewsEarly: a key decided steadily on cold leases takes
// one round trip in a decision, its first: each lease is renewed beside
// the decision that finds its units or its time low (here its time: a
// lease holds 1.25 leases' spending), nothing expires, and after Close the
// state holds exactly the decisions made.
func TestColdLeaseRenewsEarly(t *testing.T) {
	for _, p := range []limit.Policy{
		limit.TokenBucket(100_000, limit.PerHour(1)).Named("tb"),
		limit.GCRA(limit.PerHour(1), 100_000).Named("gcra"),
	} {
		t.Run(p.Name, func(t *testing.T) {
			clock, s := oneColdStore(t)
			ctx := context.Background()
			const decisions = 3000 // 10 a second for 5 minutes: 5 leases
			spendSteadily(t, clock, s, p, decisions)
			st := s.AllowanceStats()
			t.Logf("%+v", st)
			if st.Remote != 1 || st.ColdLocal != decisions-1 || st.ColdRenewals < 4 || st.Expired != 0 {
				t.Fatalf("stats %+v: want 1 one-trip decision, %d from cold leases, 4 or more early renewals, nothing expired",
					st, decisions-1)
			}
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
			got, err := plainStore(t, clock, s).AllowN(ctx, "k", p, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got.Remaining != p.Limit-decisions {
				t.Fatalf("after Close the state has %d free, want %d", got.Remaining, p.Limit-decisions)
			}
		})
	}
}

// leasedColdStore is oneColdStore after its one-trip decision on "k" under
// p, which is granted the key's first cold lease.
func leasedColdStore(t *testing.T, p limit.Policy) (*limittest.Clock, *redislimit.Store) {
	t.Helper()
	clock, s := oneColdStore(t)
	admitN(t, s, p, 1)
	return clock, s
}

// TestColdLeaseRenewalOffTheDecisionsPath: the decision that finds its
// cold lease due an early renewal answers from the lease without the
// shard's lock, which the test holds throughout; the lease is queued once,
// not once a decision; its renewal begins from the store's background
// once the lock is free; and the goroutine that began it ends with nothing
// more queued. After Close the state holds exactly the decisions made.
func TestColdLeaseRenewalOffTheDecisionsPath(t *testing.T) {
	for _, p := range unrefilled(100_000) {
		t.Run(p.Name, func(t *testing.T) {
			clock, s := leasedColdStore(t, p)
			ctx := context.Background()
			// Into the lease's last eighth: its next spend finds it due.
			clock.Advance(time.Minute * 15 / 16)
			const decisions = 5 // fewer than the first lease's units
			unlock := s.LockShardForTest("k", p)
			answeredUnlocked(t, admitAsync(ctx, s, "k", p, decisions), unlock, "the decisions on a lease due its renewal")
			queued := s.ColdRenewalsInFlightForTest()
			st := s.AllowanceStats()
			unlock()
			if queued != 1 || st.ColdRenewals != 0 || st.ColdLocal != decisions {
				t.Fatalf("with the lock held: %d renewals queued or in flight, %d sent, %d decisions from the lease; want 1, 0 and %d",
					queued, st.ColdRenewals, st.ColdLocal, decisions)
			}
			for deadline := time.Now().Add(10 * time.Second); s.AllowanceStats().ColdRenewals == 0 || s.ColdRenewalsInFlightForTest() > 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the queued renewal did not begin and end within 10s of the lock's release")
				}
			}
			if st := s.AllowanceStats(); st.ColdRenewals != 1 || st.Remote != 1 || st.Expired != 0 {
				t.Fatalf("stats %+v: want 1 early renewal, 1 one-trip decision, nothing expired", st)
			}
			// With nothing more queued the goroutine ends (after 100 ms),
			// the store still open.
			for deadline := time.Now().Add(5 * time.Second); s.ColdQueueRunsForTest(); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the renewal queue's goroutine still ran 5s after its last renewal")
				}
			}
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
			got, err := plainStore(t, clock, s).AllowN(ctx, "k", p, 0)
			if err != nil {
				t.Fatal(err)
			}
			if want := p.Limit - 1 - decisions; got.Remaining != want {
				t.Fatalf("after Close the state has %d free, want %d", got.Remaining, want)
			}
		})
	}
}

// TestColdLeaseRunsDryWhileQueued: a lease queued for its early renewal
// that runs out of units before the renewal begins has it begun by the
// decision that finds it dry, which waits for the units rather than
// ending the lease with a round trip of its own.
func TestColdLeaseRunsDryWhileQueued(t *testing.T) {
	for _, p := range unrefilled(100_000) {
		t.Run(p.Name, func(t *testing.T) {
			clock, s := leasedColdStore(t, p)
			ctx := context.Background()
			// The lock held while the lease is spent to its last unit: the
			// background cannot begin the queued renewal meanwhile.
			unlock := s.LockShardForTest("k", p)
			locked := true
			defer func() {
				if locked {
					unlock()
				}
			}()
			spent := 0
			for {
				before := s.AllowanceStats().ColdLocal
				res := admitAsync(ctx, s, "k", p, 1)
				select {
				case err := <-res:
					if err != nil {
						t.Fatal(err)
					}
					if s.AllowanceStats().ColdLocal != before+1 {
						t.Fatal("a decision answered with the lock held, not from the lease")
					}
					if spent++; spent == 100 {
						t.Fatal("100 decisions from the first lease: it never ran dry")
					}
					clock.Advance(10 * time.Millisecond)
					continue
				case <-time.After(200 * time.Millisecond):
				}
				// This decision waits for the lock: the lease is dry.
				if n := s.ColdRenewalsInFlightForTest(); n != 1 {
					t.Fatalf("the lease ran dry after %d decisions with %d renewals queued or in flight, want 1", spent, n)
				}
				unlock()
				locked = false
				if err := <-res; err != nil {
					t.Fatal(err)
				}
				spent++
				break
			}
			waitColdRenewals(s) // in case a slow decision, not a dry lease, ended the loop
			st := s.AllowanceStats()
			if st.Remote != 1 || st.ColdRenewals != 1 || st.ColdLocal != int64(spent) {
				t.Fatalf("stats %+v: want 1 one-trip decision, 1 early renewal, %d decisions from the lease", st, spent)
			}
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
			got, err := plainStore(t, clock, s).AllowN(ctx, "k", p, 0)
			if err != nil {
				t.Fatal(err)
			}
			if want := p.Limit - 1 - int64(spent); got.Remaining != want {
				t.Fatalf("after Close the state has %d free, want %d", got.Remaining, want)
			}
		})
	}
}

// TestColdLeaseRenewalAnswerLost: the answers of early renewals are lost
// (a timeout after Redis applied the call). A report of a lease's spends
// counts from its grant, and a renewal keeps the lease's seq, so the next
// report charges only the spends the lost one did not, and the units the
// lost one granted stay in the lease, given back with it:
//   - with every other answer lost, the leases end by reports (run out,
//     or Close), and after Close the state holds exactly the decisions
//     admitted;
//   - with every answer lost, a lease ends by its time at the store, and
//     the state charges it in full at its end in Redis: the capacity lost
//     is at most the units those calls granted and those the store let
//     expire, and never more than was admitted is free.
func TestColdLeaseRenewalAnswerLost(t *testing.T) {
	lost := errors.New("answer lost")
	for _, p := range unrefilled(100_000) {
		for _, every := range []int64{2, 1} {
			t.Run(fmt.Sprintf("%s/every%d", p.Name, every), func(t *testing.T) {
				clock, s := oneColdStore(t)
				ctx := context.Background()
				var renewals, dropped, unknown atomic.Int64
				redislimit.SetColdRenewedHookForTest(t, func(granted int64, err error) error {
					if err == nil && renewals.Add(1)%every == 0 {
						dropped.Add(1)
						unknown.Add(granted)
						return lost
					}
					return err
				})
				const decisions = 3000 // 10 a second for 5 minutes: 5 leases or more
				spendSteadily(t, clock, s, p, decisions)
				st := s.AllowanceStats()
				t.Logf("%d renewals, %d answers lost (%d units); %+v", renewals.Load(), dropped.Load(), unknown.Load(), st)
				if err := s.Close(ctx); err != nil {
					t.Fatal(err)
				}
				got, err := plainStore(t, clock, s).AllowN(ctx, "k", p, 0)
				if err != nil {
					t.Fatal(err)
				}
				free := p.Limit - decisions
				least := free
				if every == 1 {
					least -= unknown.Load() + st.Expired
				}
				if got.Remaining < least || got.Remaining > free {
					t.Fatalf("after Close the state has %d free, want %d to %d", got.Remaining, least, free)
				}
				if dropped.Load() < 2 {
					t.Fatalf("%d renewal answers lost, want 2 or more", dropped.Load())
				}
			})
		}
	}
}

// TestColdLeaseChargedCountKept: once a renewal charged a cold lease's
// spends, the lease's ledger entry keeps that count through the scripts
// that rewrite the ledger for other callers (limit.lua for AllowAll,
// allowance.lua for another holder's take and return), so the lease's
// last report charges only the spends after it.
func TestColdLeaseChargedCountKept(t *testing.T) {
	charged := regexp.MustCompile(`:\d+:\d+:\d+:7( |$)`)
	for _, p := range unrefilled(1000) {
		t.Run(p.Name, func(t *testing.T) {
			clock, s := oneColdStore(t)
			plain := plainStore(t, clock, s)
			rdb := connect(t)
			ctx := context.Background()
			state := func() string {
				t.Helper()
				v, err := rdb.Get(ctx, s.Key("k", p)).Result()
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			admitN(t, s, p, 8) // one-trip, lent 8; 7 spent from the lease start its renewal
			waitColdRenewals(s)
			if v := state(); !charged.MatchString(v) {
				t.Fatalf("state %q: want the lease's entry to count 7 charged", v)
			}
			if out, err := plain.AllowAll(ctx, []limit.Request{{Key: "k", Policy: p, Cost: 1}}, nil); err != nil || !out[0].Allowed {
				t.Fatalf("AllowAll: %+v %v", out, err)
			}
			other, err := plain.LendForTest(ctx, "k", p, "other", false, 0, 0, -1, 5, time.Minute)
			if err != nil || other.Granted != 5 {
				t.Fatalf("take: %+v %v", other, err)
			}
			if v := state(); !charged.MatchString(v) {
				t.Fatalf("state %q after AllowAll and another holder's take: want the lease's entry to count 7 charged", v)
			}
			if _, err := plain.LendForTest(ctx, "k", p, "other", true, other.Seq, 0, -1, 0, time.Minute); err != nil {
				t.Fatal(err)
			}
			admitN(t, s, p, 3)
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
			got, err := plain.AllowN(ctx, "k", p, 0)
			if err != nil {
				t.Fatal(err)
			}
			if want := p.Limit - 12; got.Remaining != want { // 11 decisions at s, 1 AllowAll
				t.Fatalf("after Close the state has %d free, want %d", got.Remaining, want)
			}
		})
	}
}

// loseStateAndClose deletes the state of "k" under p, as Redis restarted
// empty would, closes s, and returns the new state as a query sees it.
func loseStateAndClose(t *testing.T, clock limit.Clock, s *redislimit.Store, p limit.Policy) limit.Decision {
	t.Helper()
	ctx := context.Background()
	if err := connect(t).Del(ctx, s.Key("k", p)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := plainStore(t, clock, s).AllowN(ctx, "k", p, 0)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestColdLeaseReportAfterStateLost: a key's state is lost (as when
// Redis restarts empty) after a renewal charged 7 of its cold lease's
// spends; the lease's last report, at Close, finds no entry and is
// charged every spend since the lease's grant, 11, to the new state
// (DESIGN-allowances.md section 10, "A renewal's answer lost").
func TestColdLeaseReportAfterStateLost(t *testing.T) {
	for _, p := range unrefilled(1000) {
		t.Run(p.Name, func(t *testing.T) {
			clock, s := oneColdStore(t)
			admitN(t, s, p, 8) // one-trip, lent 8; 7 spent from the lease start its renewal
			waitColdRenewals(s)
			if st := s.AllowanceStats(); st.ColdRenewals != 1 || st.ColdLeases != 1 {
				t.Fatalf("stats %+v: want 1 renewal, the lease held", st)
			}
			admitN(t, s, p, 4) // the 8th unit of the first grant, and 3 more
			got := loseStateAndClose(t, clock, s, p)
			if want := p.Limit - 11; got.Remaining != want {
				t.Fatalf("after the state was lost and Close, the state has %d free, want %d", got.Remaining, want)
			}
		})
	}
}

// TestColdLeaseReportAfterStateLostAtMostTheLimit: a lease renewed
// through more spends than the key's limit (it refills) reports them all
// after its key's state is lost; the new state is charged the limit, no
// more: a full bucket, which drains in a period, not in three.
func TestColdLeaseReportAfterStateLostAtMostTheLimit(t *testing.T) {
	for _, p := range []limit.Policy{
		limit.TokenBucket(100, limit.PerSecond(100)).Named("tb"),
		limit.GCRA(limit.PerSecond(100), 100).Named("gcra"),
	} {
		t.Run(p.Name, func(t *testing.T) {
			clock, s := oneColdStore(t)
			spendSteadily(t, clock, s, p, 300) // 10 a second for 30 s
			if st := s.AllowanceStats(); st.Remote != 1 || st.ColdLeases != 1 {
				t.Fatalf("stats %+v: want one lease, renewed, for every decision after the first", st)
			}
			got := loseStateAndClose(t, clock, s, p)
			// The limit is charged at the last spend, 100 ms ago: 10 units
			// have refilled since. The 299 spends charged would leave none
			// free for 2.9 s.
			if got.Remaining != 10 || got.ResetAfter != 900*time.Millisecond {
				t.Fatalf("after the state was lost and Close: %d free, reset after %v; want 10 free and 900ms (the limit charged, not the 299 spends)",
					got.Remaining, got.ResetAfter)
			}
		})
	}
}

// TestColdLeaseKeptWhenNotExtended: an early renewal on a key that has
// come near its limit is granted nothing; the lease goes on as it was, and
// what the store still holds of it stays lent in Redis: the store spends
// it, another store gets the rest of the limit and no more.
func TestColdLeaseKeptWhenNotExtended(t *testing.T) {
	for _, p := range []limit.Policy{
		limit.TokenBucket(64, limit.PerHour(1)).Named("tb"),
		limit.GCRA(limit.PerHour(1), 64).Named("gcra"),
	} {
		t.Run(p.Name, func(t *testing.T) {
			clock, s := oneColdStore(t)
			other := plainStore(t, clock, s)
			ctx := context.Background()
			allow := func(st *redislimit.Store, cost int64) bool {
				t.Helper()
				d, err := st.AllowN(ctx, "k", p, cost)
				if err != nil {
					t.Fatal(err)
				}
				return d.Allowed
			}
			if !allow(s, 1) || !allow(other, 30) { // s is lent 8 along
				t.Fatal("the first decisions were refused")
			}
			for range 7 { // the last leaves 1 of 8: the renewal starts
				if !allow(s, 1) {
					t.Fatal("refused from the cold lease")
				}
				clock.Advance(10 * time.Millisecond)
			}
			for s.ColdRenewalsInFlightForTest() > 0 {
				time.Sleep(50 * time.Microsecond)
			}
			// 64 - 1 - 30 - 7 - 1 held = 25 free: less than half the
			// limit beyond a new lease, so the renewal granted nothing.
			if st := s.AllowanceStats(); st.ColdRenewals != 1 || st.Lent != 8 || st.ColdLeases != 1 {
				t.Fatalf("stats %+v: want 1 renewal granting nothing, the lease kept", st)
			}
			if !allow(s, 1) {
				t.Fatal("the unit still held was refused")
			}
			got := int64(0)
			for allow(other, 1) {
				got++
			}
			if got != 25 {
				t.Fatalf("the other store got %d units, want 25 (64 - 30 - 9)", got)
			}
			if allow(s, 1) {
				t.Fatal("the store admitted past its lease with the key at its limit")
			}
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if d, err := other.AllowN(ctx, "k", p, 0); err != nil || d.Remaining != 0 {
				t.Fatalf("after Close: %+v %v; want 0 free", d, err)
			}
		})
	}
}

// TestColdLeaseEndsInRedis: a store that stops deciding on a key loses its
// cold lease's unspent units only until the lease ends; then the state
// holds the lease in full, spends included, and no more.
func TestColdLeaseEndsInRedis(t *testing.T) {
	p := limit.TokenBucket(1000, limit.PerHour(1)).Named("tb")
	clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
	stores := coldStores(t, clock, 1, time.Second, 10*time.Second)
	s := stores[0]
	ctx := context.Background()
	for range 3 {
		if _, err := s.AllowN(ctx, "k", p, 1); err != nil {
			t.Fatal(err)
		}
	}
	plain := plainStore(t, clock, s)
	got, err := plain.AllowN(ctx, "k", p, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Remaining != 1000-1-8 {
		t.Fatalf("during the lease %d free, want 991 (1 decided one-trip, 8 lent)", got.Remaining)
	}
	clock.Advance(11 * time.Second)
	got, err = plain.AllowN(ctx, "k", p, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The lease is charged in full at its end: 1 + 8, and 10 s of a rate
	// of 1/h refill nothing.
	if got.Remaining != 1000-9 {
		t.Fatalf("after the lease %d free, want 991", got.Remaining)
	}
	// The store's next decision finds its deadline passed: one-trip.
	before := s.AllowanceStats()
	if _, err := s.AllowN(ctx, "k", p, 1); err != nil {
		t.Fatal(err)
	}
	after := s.AllowanceStats()
	if after.Remote != before.Remote+1 || after.Expired-before.Expired != 6 {
		t.Fatalf("stats before %+v after %+v: want a one-trip decision and the 6 unspent units expired", before, after)
	}
	s.KillForTest()
}

// TestColdLeaseNotNearTheLimit: a key with less than half its limit free
// beyond the loan is not lent cold; its decisions stay one-trip (and may
// become hot as before).
func TestColdLeaseNotNearTheLimit(t *testing.T) {
	p := limit.TokenBucket(64, limit.PerHour(1)).Named("tb")
	_, s := oneColdStore(t)
	ctx := context.Background()
	// 64/8 = 8 units a lease; a lend needs 32 + 8 free after the decision.
	if _, err := s.AllowN(ctx, "k", p, 30); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := s.AllowN(ctx, "k", p, 1); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.AllowanceStats(); st.Lent != 0 || st.Remote != 6 {
		t.Fatalf("stats %+v: want no lend, 6 one-trip decisions", st)
	}
}

// TestColdLeaseRefusedWhileAsked: a decision that Redis refuses while
// another decision at its store is asking for the key's cold lease (the
// units on their way here already counted there) waits for that lease and
// spends from it, so a burst of first decisions leaves no lent unit
// unspent: here the key admits exactly its limit, the second decision
// answered from the lease its first asked for.
func TestColdLeaseRefusedWhileAsked(t *testing.T) {
	for _, p := range unrefilled(64) {
		t.Run(p.Name, func(t *testing.T) {
			s, plain, asked, hold, waiting := heldAsk(t)
			ctx := context.Background()
			type answer struct {
				dec limit.Decision
				err error
			}
			decide := func() chan answer {
				ch := make(chan answer, 1)
				go func() {
					dec, err := s.AllowN(ctx, "k", p, 1)
					ch <- answer{dec, err}
				}()
				return ch
			}
			first := decide()
			if g := <-asked; g != 8 {
				t.Fatalf("the first decision was lent %d units, want 8", g)
			}
			// The lease is in Redis and not yet here: another store spends
			// the rest of the limit.
			admitted := 1 + drain(t, plain, "k", p)
			if admitted != 64-8 {
				t.Fatalf("the other store admitted %d, want %d", admitted-1, 64-8-1)
			}
			second := decide()
			select {
			case <-waiting:
			case a := <-second:
				t.Fatalf("the second decision was answered before its store's lease was in: %+v, %v", a.dec, a.err)
			}
			close(hold)
			for i, ch := range []chan answer{first, second} {
				a := <-ch
				if a.err != nil || !a.dec.Allowed {
					t.Fatalf("decision %d: %+v, %v; want allowed", i+1, a.dec, a.err)
				}
			}
			admitted++
			decided := int64(2) // the store's decisions
			for {
				dec, err := s.AllowN(ctx, "k", p, 1)
				if err != nil {
					t.Fatal(err)
				}
				decided++
				if !dec.Allowed {
					break
				}
				admitted++
			}
			if admitted != p.Limit {
				t.Fatalf("%d admitted, want exactly the limit, %d", admitted, p.Limit)
			}
			if st := s.AllowanceStats(); st.Remote+st.ColdLocal != decided {
				t.Errorf("stats %+v: one-trip and lease decisions add to %d, want the store's %d decisions",
					st, st.Remote+st.ColdLocal, decided)
			}
		})
	}
}

// heldAsk returns a store with cold leases on a fake clock, a store
// without allowances beside it, and the hooks of the store's lease asks: an
// ask answered by Redis sends its grant on asked and waits until hold is
// closed; a decision refused while an ask is in flight signals waiting
// before it waits for the ask.
func heldAsk(t *testing.T) (s, plain *redislimit.Store, asked chan int64, hold chan struct{}, waiting chan struct{}) {
	t.Helper()
	clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
	s = coldStores(t, clock, 1, time.Second, time.Minute)[0]
	plain = plainStore(t, clock, s)
	asked, hold, waiting = make(chan int64, 1), make(chan struct{}), make(chan struct{}, 1)
	redislimit.SetColdAskHooksForTest(s, func(granted int64) {
		asked <- granted
		<-hold
	}, func() { waiting <- struct{}{} })
	t.Cleanup(func() { redislimit.SetColdAskHooksForTest(nil, nil, nil) })
	return s, plain, asked, hold, waiting
}

// TestColdLeaseAskWaitEndsWithContext: a decision refused while its
// store's ask for the key's lease is in flight waits for that ask no longer
// than its context: it returns Redis's refusal, and the lease, once in,
// is spent by the next decision.
func TestColdLeaseAskWaitEndsWithContext(t *testing.T) {
	p := unrefilled(64)[0]
	s, plain, asked, hold, waiting := heldAsk(t)
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		_, err := s.AllowN(ctx, "k", p, 1)
		first <- err
	}()
	if g := <-asked; g != 8 {
		t.Fatalf("the first decision was lent %d units, want 8", g)
	}
	drain(t, plain, "k", p)
	cctx, cancel := context.WithCancel(ctx)
	second := make(chan limit.Decision, 1)
	go func() {
		dec, err := s.AllowN(cctx, "k", p, 1)
		if err != nil {
			t.Error(err)
		}
		second <- dec
	}()
	<-waiting
	cancel()
	select {
	case dec := <-second:
		if dec.Allowed || dec.RetryAfter <= 0 {
			t.Fatalf("the canceled decision: %+v, want Redis's refusal", dec)
		}
	case <-time.After(10 * time.Second):
		close(hold)
		t.Fatal("the decision still waits for the ask 10 s after its context ended")
	}
	close(hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	dec, err := s.AllowN(ctx, "k", p, 1)
	if err != nil || !dec.Allowed {
		t.Fatalf("the next decision: %+v, %v; want allowed from the lease", dec, err)
	}
}

// TestColdLeaseExactUnderConcurrency is TestAllowanceExactUnderConcurrency
// with cold leases: the Zipf spread is lent cold, the hot keys as before.
func TestColdLeaseExactUnderConcurrency(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
	total := exactUnderConcurrency(t, clock, coldStores(t, clock, 3, 200*time.Millisecond, time.Second))
	if total.ColdLocal == 0 || total.Local == total.ColdLocal {
		t.Fatalf("stats %+v: want decisions from cold leases and from hot allowances", total)
	}
}

// TestColdLeaseExactAsKeysFill: three stores lend keys cold while they are
// far from their limit, then 64 goroutines each drive the keys to it. The
// sum admitted never exceeds the limit (the refill is nil: 1 an hour), and
// after Close the state holds exactly the admissions: no unit lent is lost
// or counted twice.
func TestColdLeaseExactAsKeysFill(t *testing.T) {
	const keys, limitN = 10, 400
	for _, p := range unrefilled(limitN) {
		t.Run(p.Name, func(t *testing.T) {
			clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
			stores := coldStores(t, clock, 3, time.Second, time.Minute)
			ctx := context.Background()
			var admitted [keys]atomic.Int64
			var wg sync.WaitGroup
			errc := make(chan error, 3*64)
			for round := range 200 {
				for si, s := range stores {
					for g := range 64 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							k := (si*64 + g + round) % keys
							dec, err := s.AllowN(ctx, fmt.Sprintf("k%d", k), p, 1)
							if err != nil {
								errc <- err
								return
							}
							if dec.Allowed {
								admitted[k].Add(1)
							}
						}()
					}
				}
				wg.Wait()
				clock.Advance(time.Millisecond)
			}
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
			var cold int64
			for _, s := range stores {
				cold += s.AllowanceStats().ColdLocal
				if err := s.Close(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if cold == 0 {
				t.Fatal("no decision was answered from a cold lease")
			}
			checkFree(t, clock, stores[0], p, admitted[:])
			t.Logf("%d decisions from cold leases; admitted per key %d..", cold, admitted[0].Load())
		})
	}
}

// TestColdLeaseHoldsAtMostHalf: however many stores take cold leases on a
// key, together they hold at most half its limit: a loan is granted only
// while half the limit stays free beyond it.
func TestColdLeaseHoldsAtMostHalf(t *testing.T) {
	for _, p := range []limit.Policy{
		limit.TokenBucket(64, limit.PerHour(1)).Named("tb"),
		limit.GCRA(limit.PerHour(1), 64).Named("gcra"),
	} {
		t.Run(p.Name, func(t *testing.T) {
			clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
			stores := coldStores(t, clock, 10, time.Second, time.Minute)
			ctx := context.Background()
			var lent int64
			for _, s := range stores {
				if _, err := s.AllowN(ctx, "k", p, 1); err != nil {
					t.Fatal(err)
				}
				lent += s.AllowanceStats().Lent
			}
			dec, err := plainStore(t, clock, stores[0]).AllowN(ctx, "k", p, 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("10 stores: %d units lent cold, %d free", lent, dec.Remaining)
			if lent == 0 || lent > 32 {
				t.Fatalf("%d units lent cold, want some and at most 32 (half the limit)", lent)
			}
			if dec.Remaining != 64-10-lent || dec.Remaining < 32-10 {
				t.Fatalf("%d free, want %d (64 - 10 decided - %d lent)", dec.Remaining, 64-10-lent, lent)
			}
		})
	}
}

// TestColdLeaseMemory: cold leases past their end are forgotten as the
// store goes on deciding, and MaxColdLeases caps what is held; decisions
// beyond the cap take the one-trip path, answered as before.
func TestColdLeaseMemory(t *testing.T) {
	p := limit.TokenBucket(1000, limit.PerSecond(1000)).Named("tb")
	clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
	c := connect(t)
	s, err := redislimit.New(c, redislimit.Options{Prefix: testPrefix(t, c), Clock: clock, LocalAllowance: true,
		ColdLease: time.Second, MaxColdLeases: 1500})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	ctx := context.Background()
	decide := func(prefix string, n int) {
		t.Helper()
		for i := range n {
			dec, err := s.AllowN(ctx, fmt.Sprintf("%s%d", prefix, i), p, 1)
			if err != nil || !dec.Allowed {
				t.Fatalf("%s%d: %+v %v", prefix, i, dec, err)
			}
		}
	}
	decide("a", 1000)
	if n := s.AllowanceStats().ColdLeases; n != 1000 {
		t.Fatalf("%d cold leases after 1000 keys, want 1000", n)
	}
	clock.Advance(2 * time.Second)
	decide("b", 1000)
	// A shard forgets its ended leases when a decision comes to it: those
	// of shards that no "b" key falls in are still held.
	visited := map[int]bool{}
	for i := range 1000 {
		visited[s.ShardForTest(fmt.Sprintf("b%d", i), p)] = true
	}
	left := 0
	for i := range 1000 {
		if !visited[s.ShardForTest(fmt.Sprintf("a%d", i), p)] {
			left++
		}
	}
	if left > 100 {
		t.Fatalf("%d of the first keys fall in shards no later key does: the test's keys do not spread", left)
	}
	if n := s.AllowanceStats().ColdLeases; n != int64(1000+left) {
		t.Fatalf("%d cold leases after the first 1000 ended and 1000 others were lent, want %d (%d of the first in shards not decided since)", n, 1000+left, left)
	}
	decide("c", 1000)
	st := s.AllowanceStats()
	if st.ColdLeases != 1500 || st.Remote != 3000 {
		t.Fatalf("stats %+v: want the 1500 of MaxColdLeases held, 3000 one-trip decisions", st)
	}
}

// TestColdLeaseDecisionsDoNotAllocate: a decision answered from a cold
// lease allocates nothing (the key is looked up without being built as a
// string), so that a store deciding most of its load locally leaves the
// garbage collector nothing to do on that path.
func TestColdLeaseDecisionsDoNotAllocate(t *testing.T) {
	clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
	s := coldStores(t, clock, 1, time.Second, time.Hour)[0]
	ctx := context.Background()
	for _, p := range []limit.Policy{
		limit.TokenBucket(1_000_000, limit.PerSecond(1_000_000)).Named("tb"),
		limit.GCRA(limit.PerSecond(1_000_000), 1_000_000).Named("gcra"),
	} {
		if _, err := s.AllowN(ctx, "user-1", p, 1); err != nil {
			t.Fatal(err)
		}
		// The lease after the first is sized from the rate: well over
		// the 1,000 decisions measured.
		for range 9 {
			if _, err := s.AllowN(ctx, "user-1", p, 1); err != nil {
				t.Fatal(err)
			}
		}
		before := s.AllowanceStats().ColdLocal
		allocs := testing.AllocsPerRun(1000, func() {
			if _, err := s.AllowN(ctx, "user-1", p, 1); err != nil {
				t.Fatal(err)
			}
		})
		local := s.AllowanceStats().ColdLocal - before
		if local != 1001 { // AllocsPerRun runs the function once more to warm up
			t.Fatalf("%s: %d of 1001 decisions from the cold lease", p.Name, local)
		}
		if allocs != 0 {
			t.Errorf("%s: %v allocations per decision from a cold lease, want 0", p.Name, allocs)
		}
	}
}

// TestColdLeaseKeysAndPolicies: a lease holds its Redis key within itself
// when it is short and apart when not, and shares its policy with the
// other leases of an equal one, from a table begun again past 1,024
// policies. Keys of every shape (short, long, tagged, empty, opening with
// a brace or a backslash) and 1,100 policies each spend from their own
// lease, and after Close the state holds exactly their decisions.
func TestColdLeaseKeysAndPolicies(t *testing.T) {
	type pair struct {
		key string
		p   limit.Policy
	}
	var pairs []pair
	base := limit.TokenBucket(1000, limit.PerHour(1))
	for _, k := range []string{"k", strings.Repeat("long-key/", 12), "{tag}x", "", "}x", `\x`, "k2"} {
		pairs = append(pairs, pair{k, base.Named("tb")}, pair{k, limit.GCRA(limit.PerHour(1), 1000).Named("tb")})
	}
	for i := range 1100 {
		pairs = append(pairs, pair{"p", base.Named("p" + strconv.Itoa(i))})
	}
	clock, s := oneColdStore(t)
	ctx := context.Background()
	const decisions = 10
	for round := range decisions {
		for _, pr := range pairs {
			dec, err := s.AllowN(ctx, pr.key, pr.p, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !dec.Allowed {
				t.Fatalf("round %d, key %q, policy %s: refused: %+v", round, pr.key, pr.p.Name, dec)
			}
		}
		clock.Advance(10 * time.Millisecond)
	}
	// Each pair's first decision is one-trip; the others spend from its
	// lease, unless its early renewal found the store's 512 slots taken
	// (the pairs renew together here) and the lease ran out.
	st := s.AllowanceStats()
	if st.Remote+st.ColdLocal != int64(len(pairs)*decisions) || st.ColdLeases != int64(len(pairs)) ||
		st.ColdLocal < int64(len(pairs)*decisions/2) {
		t.Fatalf("stats %+v: want %d decisions, most from cold leases, and %d leases held", st, len(pairs)*decisions, len(pairs))
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	plain := plainStore(t, clock, s)
	for _, pr := range pairs {
		got, err := plain.AllowN(ctx, pr.key, pr.p, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got.Remaining != 1000-decisions {
			t.Fatalf("key %q, policy %s: after Close the state has %d free, want %d", pr.key, pr.p.Name, got.Remaining, 1000-decisions)
		}
	}
}

// TestColdLeaseCloseWhileSpending: callers spend from cold leases, without
// the shard's lock, while the three stores close and give the leases back.
// After Close the state holds exactly the admissions: a spend that lands
// while its lease is given back is either counted in what is reported or
// refused, never admitted from units returned.
func TestColdLeaseCloseWhileSpending(t *testing.T) {
	const keys, limitN, callers = 16, 100_000, 16
	for _, p := range unrefilled(limitN) {
		t.Run(p.Name, func(t *testing.T) {
			clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
			stores := coldStores(t, clock, 3, time.Second, time.Minute)
			ctx := context.Background()
			var admitted [keys]atomic.Int64
			var wg sync.WaitGroup
			stop := make(chan struct{})
			errc := make(chan error, 3*callers)
			for si, s := range stores {
				for g := range callers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := si*callers + g; ; i++ {
							select {
							case <-stop:
								return
							default:
							}
							k := i % keys
							dec, err := s.AllowN(ctx, "k"+strconv.Itoa(k), p, 1)
							if err != nil {
								errc <- err
								return
							}
							if dec.Allowed {
								admitted[k].Add(1)
							}
						}
					}()
				}
			}
			// Close once every store answers from its leases.
			for _, s := range stores {
				for s.AllowanceStats().ColdLocal < 2000 {
					time.Sleep(time.Millisecond)
				}
			}
			var cwg sync.WaitGroup
			for _, s := range stores {
				cwg.Add(1)
				go func() {
					defer cwg.Done()
					if err := s.Close(ctx); err != nil {
						errc <- err
					}
				}()
			}
			cwg.Wait()
			time.Sleep(20 * time.Millisecond) // decisions on the closed stores, one-trip
			close(stop)
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
			total := checkFree(t, clock, stores[0], p, admitted[:])
			var cold int64
			for _, s := range stores {
				cold += s.AllowanceStats().ColdLocal
			}
			t.Logf("%d admitted, %d of them from cold leases", total, cold)
		})
	}
}

// TestColdLeaseReportsAsOneTrip: the decision that takes a cold lease, and
// those spent from it after, report the Remaining and ResetAfter that
// one-trip decisions on a key without a lease report at the same time:
// the units lent to the store are its own to spend, so they count as
// remaining and not as spent.
func TestColdLeaseReportsAsOneTrip(t *testing.T) {
	for _, p := range unrefilled(1000) {
		t.Run(p.Name, func(t *testing.T) {
			clock, s := oneColdStore(t)
			plain := plainStore(t, clock, s)
			ctx := context.Background()
			// coldFirst units are lent with the first decision; a renewal
			// starts once fewer than a quarter are left.
			for i := range 6 {
				got, err := s.AllowN(ctx, "leased", p, 1)
				if err != nil {
					t.Fatal(err)
				}
				want, err := plain.AllowN(ctx, "plain", p, 1)
				if err != nil {
					t.Fatal(err)
				}
				if got.Remaining != want.Remaining || got.ResetAfter != want.ResetAfter || !got.Allowed {
					t.Fatalf("decision %d: %+v, want %+v as one-trip", i, got, want)
				}
			}
			if st := s.AllowanceStats(); st.ColdLocal != 5 {
				t.Fatalf("stats %+v: want 5 decisions from the cold lease", st)
			}
		})
	}
}

// TestColdLeaseEndedBeforeItsRenewal: a decision spends the unit that
// makes its key's cold lease due for renewal without the shard's lock, and
// another decision ends the lease before the renewal, queued by the first,
// can begin under the lock. The ended lease is not renewed: its remainder, an ended
// mark, is no count of units spent, and reported as one it charged the key
// about 2^62 units (or, with a token weighing many units, failed the
// script, and with it every decision that shared the call).
func TestColdLeaseEndedBeforeItsRenewal(t *testing.T) {
	// A token weighing one unit (1 µs of debt), and two weighing hours.
	policies := append([]limit.Policy{limit.TokenBucket(1000, limit.PerSecond(1_000_000)).Named("tb-1us")},
		unrefilled(1000)...)
	for _, p := range policies {
		t.Run(p.Name, func(t *testing.T) {
			clock, s := oneColdStore(t)
			ctx := context.Background()
			// One one-trip decision, lent 8 along; 6 spent from the lease.
			for i := range 7 {
				if d, err := s.AllowN(ctx, "k", p, 1); err != nil || !d.Allowed {
					t.Fatalf("decision %d: %+v %v", i, d, err)
				}
			}
			if st := s.AllowanceStats(); st.Lent != 8 || st.ColdLocal != 6 {
				t.Fatalf("stats %+v: want 8 lent, 6 decisions from the cold lease", st)
			}
			unlock := s.LockShardForTest("k", p)
			// Leaves 1 of 8: due for renewal, which begins under the lock.
			done := admitAsync(ctx, s, "k", p, 1)
			for deadline := time.Now().Add(10 * time.Second); s.AllowanceStats().ColdLocal != 7; {
				if time.Now().After(deadline) {
					unlock()
					t.Fatalf("the decision did not spend from the cold lease in 10 s: %+v", s.AllowanceStats())
				}
				time.Sleep(50 * time.Microsecond)
			}
			giveBack := s.EndColdLockedForTest("k", p)
			unlock()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if giveBack == nil {
				t.Fatal("no cold lease to end")
			}
			if err := giveBack(ctx); err != nil {
				t.Fatal(err)
			}
			for s.ColdRenewalsInFlightForTest() > 0 {
				time.Sleep(50 * time.Microsecond)
			}
			if st := s.AllowanceStats(); st.ColdRenewals != 0 {
				t.Fatalf("stats %+v: the ended lease was renewed", st)
			}
			got, err := plainStore(t, clock, s).AllowN(ctx, "k", p, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got.Remaining != p.Limit-8 {
				t.Fatalf("the state has %d free, want %d (8 admitted)", got.Remaining, p.Limit-8)
			}
		})
	}
}

// TestColdLeaseOfEveryKeyForm: a cold lease gives its units back, at Close,
// on the key its decisions were made on, in each form a Redis key takes
// (a hash tag of the key's own, none, one added for an empty key or one
// that opens with a brace or a backslash, and a Redis key longer than a
// lease holds within itself); its decisions stay counted once it has ended.
func TestColdLeaseOfEveryKeyForm(t *testing.T) {
	keys := []string{"plain", "{tag}rest", "a{b}c", "}lead", `\lead`, "", strings.Repeat("long", 20)}
	for _, p := range unrefilled(1000) {
		t.Run(p.Name, func(t *testing.T) {
			clock, s := oneColdStore(t)
			plain := plainStore(t, clock, s)
			ctx := context.Background()
			for _, k := range keys {
				for i := range 4 {
					if d, err := s.AllowN(ctx, k, p, 1); err != nil || !d.Allowed {
						t.Fatalf("key %q, decision %d: %+v, %v", k, i, d, err)
					}
				}
			}
			if st := s.AllowanceStats(); st.ColdLeases != int64(len(keys)) || st.ColdLocal != int64(3*len(keys)) {
				t.Fatalf("stats %+v: want %d cold leases and %d decisions from them", st, len(keys), 3*len(keys))
			}
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				d, err := plain.AllowN(ctx, k, p, 0)
				if err != nil {
					t.Fatal(err)
				}
				if d.Remaining != p.Limit-4 {
					t.Errorf("key %q: %d free after 4 decisions and Close, want %d", k, d.Remaining, p.Limit-4)
				}
			}
			if st := s.AllowanceStats(); st.ColdLeases != 0 || st.ColdLocal != int64(3*len(keys)) {
				t.Errorf("stats after Close %+v: want no cold lease and %d decisions from them", st, 3*len(keys))
			}
		})
	}
}

// TestColdLocalNeverDipsAsLeasesEnd: AllowanceStats.ColdLocal, read while
// cold leases end (each moving its decision count to its shard's, slowed
// here to a millisecond between the two), never goes down and ends at the
// decisions the leases answered.
func TestColdLocalNeverDipsAsLeasesEnd(t *testing.T) {
	_, s := oneColdStore(t)
	p := unrefilled(1000)[0]
	ctx := context.Background()
	const keys = 40
	for k := range keys {
		for range 3 { // one-trip, then two from the lease
			if _, err := s.AllowN(ctx, "k"+strconv.Itoa(k), p, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	if st := s.AllowanceStats(); st.ColdLocal != 2*keys {
		t.Fatalf("stats %+v: want %d decisions from cold leases", st, 2*keys)
	}
	var moves atomic.Int64
	redislimit.SetCountMoveHookForTest(t, func() { moves.Add(1); time.Sleep(time.Millisecond) })
	stop, done := make(chan struct{}), make(chan struct{})
	var reads, dips atomic.Int64
	var first atomic.Value
	go func() {
		defer close(done)
		last := int64(2 * keys)
		for {
			select {
			case <-stop:
				return
			default:
			}
			got := s.AllowanceStats().ColdLocal
			reads.Add(1)
			if got < last {
				dips.Add(1)
				first.CompareAndSwap(nil, fmt.Sprintf("%d after %d", got, last))
			}
			last = max(last, got)
		}
	}()
	for k := range keys {
		if err := s.Reset(ctx, "k"+strconv.Itoa(k), p); err != nil {
			close(stop)
			<-done
			t.Fatal(err)
		}
	}
	close(stop)
	<-done
	if n := moves.Load(); n != keys {
		t.Errorf("%d counts moved as the %d leases ended, want one each", n, keys)
	}
	if n := dips.Load(); n > 0 {
		t.Errorf("ColdLocal went down %d times in %d reads while leases ended, first %v", n, reads.Load(), first.Load())
	}
	if st := s.AllowanceStats(); st.ColdLocal != 2*keys || st.ColdLeases != 0 {
		t.Errorf("stats %+v: want no cold lease left and %d decisions from them", st, 2*keys)
	}
}

// TestColdLeaseNotSpentUnderAnotherPolicy: a decision under a policy that
// shares a lease's key, name and algorithm but not its numbers (a limit or
// a rate changed in a reload) is never answered from that lease: each of
// the policy's numbers changed alone sends the decision past the lease,
// to the one-trip path. A decision without the lock finds the lease by its
// Redis key, which names the policy's name and algorithm only; the lease's
// policy is compared whole.
func TestColdLeaseNotSpentUnderAnotherPolicy(t *testing.T) {
	base := limit.TokenBucket(1000, limit.PerSecond(100)).Named("tb")
	others := map[string]limit.Policy{
		"limit":  limit.TokenBucket(1001, limit.PerSecond(100)).Named("tb"),
		"count":  limit.TokenBucket(1000, limit.PerSecond(101)).Named("tb"),
		"period": limit.TokenBucket(1000, limit.Rate{Count: 100, Period: 1001 * time.Millisecond}).Named("tb"),
		"window": func() limit.Policy { p := base; p.Window = time.Second; return p }(),
	}
	for name, other := range others {
		t.Run(name, func(t *testing.T) {
			_, s := oneColdStore(t)
			ctx := context.Background()
			for range 3 {
				if dec, err := s.AllowN(ctx, "k", base, 1); err != nil || !dec.Allowed {
					t.Fatalf("%+v %v", dec, err)
				}
			}
			st := s.AllowanceStats()
			if st.ColdLeases != 1 || st.ColdLocal != 2 {
				t.Fatalf("stats %+v: want a lease, and two decisions from it", st)
			}
			if _, err := s.AllowN(ctx, "k", other, 1); err != nil {
				t.Fatal(err)
			}
			if got := s.AllowanceStats(); got.ColdLocal != st.ColdLocal || got.Remote != st.Remote+1 {
				t.Fatalf("stats %+v after a decision under %+v: want it one-trip, not from the lease of %+v (before: %+v)",
					got, other, base, st)
			}
		})
	}
}
