package redislimit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/limit/redislimit"
)

// lendPolicies are the algorithms allowances hold for now: a limit of 10
// that refills so slowly (one unit an hour) that nothing drains during a
// test.
var lendPolicies = []limit.Policy{
	limit.TokenBucket(10, limit.PerHour(1)).Named("tb"),
	limit.GCRA(limit.PerHour(1), 10).Named("gcra"),
}

func lendStores(t *testing.T, clock limit.Clock, n int) []*redislimit.Store {
	t.Helper()
	out := make([]*redislimit.Store, n)
	for i, s := range singleFactory(t, clock, n) {
		out[i] = s.(*redislimit.Store)
	}
	return out
}

const lease = 100 * time.Millisecond

// TestLendGrantsOnlyWhatIsNotLent checks the script's ledger: a grant is
// what the state has minus what other holders hold, and a one-trip caller
// of the script sees the same.
func TestLendGrantsOnlyWhatIsNotLent(t *testing.T) {
	ctx := context.Background()
	for _, p := range lendPolicies {
		t.Run(p.Name, func(t *testing.T) {
			s := lendStores(t, limittest.NewClock(time.Unix(1_700_000_000, 0)), 1)[0]
			a, err := s.LendForTest(ctx, "k", p, "a", false, 0, 0, -1, 6, lease)
			if err != nil {
				t.Fatal(err)
			}
			if a.Granted != 6 || a.Seq == 0 || a.Holders != 1 || a.Remaining != 4 || a.LeaseFor != lease {
				t.Fatalf("first take: %+v, want 6 granted, a lease, 1 holder, 4 remaining", a)
			}
			b, err := s.LendForTest(ctx, "k", p, "b", false, 0, 0, -1, 6, lease)
			if err != nil {
				t.Fatal(err)
			}
			if b.Granted != 4 || b.Holders != 2 || b.Remaining != 0 || b.Retry <= 0 {
				t.Fatalf("second take: %+v, want 4 granted, 2 holders, 0 remaining, a retry time", b)
			}
			c, err := s.LendForTest(ctx, "k", p, "c", false, 0, 0, -1, 1, lease)
			if err != nil {
				t.Fatal(err)
			}
			if c.Granted != 0 || c.Seq != 0 || c.Holders != 2 {
				t.Fatalf("third take: %+v, want nothing granted and no lease", c)
			}
			// a spent 2 of its 6 and gives the rest back: 4 come free.
			if _, err := s.LendForTest(ctx, "k", p, "a", true, a.Seq, 2, -1, 0, lease); err != nil {
				t.Fatal(err)
			}
			c, err = s.LendForTest(ctx, "k", p, "c", false, 0, 0, -1, 10, lease)
			if err != nil {
				t.Fatal(err)
			}
			if c.Granted != 4 || c.Holders != 2 {
				t.Fatalf("after a's return: %+v, want the 4 units a gave back, 2 holders", c)
			}
		})
	}
}

// TestLendRenewKeepsTheRemainderLent checks that a renewal charges what was
// reported spent and keeps the rest lent: the holder may still be spending
// it while the renewal is in flight.
func TestLendRenewKeepsTheRemainderLent(t *testing.T) {
	ctx := context.Background()
	for _, p := range lendPolicies {
		t.Run(p.Name, func(t *testing.T) {
			s := lendStores(t, limittest.NewClock(time.Unix(1_700_000_000, 0)), 1)[0]
			a, err := s.LendForTest(ctx, "k", p, "a", false, 0, 0, -1, 4, lease)
			if err != nil {
				t.Fatal(err)
			}
			r, err := s.LendForTest(ctx, "k", p, "a", false, a.Seq, 1, -1, 4, lease)
			if err != nil {
				t.Fatal(err)
			}
			// 1 spent, 3 still lent, 4 more granted: 10 - 1 - 3 - 4 = 2 left.
			if r.Granted != 4 || r.Remaining != 2 || r.Seq == a.Seq || r.Holders != 1 {
				t.Fatalf("renewal: %+v, want 4 granted, 2 remaining, a new lease, 1 holder", r)
			}
			// The old lease number is no longer valid: its return credits nothing.
			if _, err := s.LendForTest(ctx, "k", p, "a", true, a.Seq, 0, -1, 0, lease); err != nil {
				t.Fatal(err)
			}
			b, err := s.LendForTest(ctx, "k", p, "b", false, 0, 0, -1, 10, lease)
			if err != nil {
				t.Fatal(err)
			}
			if b.Granted != 2 {
				t.Fatalf("after a stale return: %+v, want 2 granted", b)
			}
		})
	}
}

// TestLendExpiredLeaseIsCharged checks that a lease whose holder never
// reports (dead, frozen) counts as spent at its end: its units are lost, but
// never handed out twice, and a late report of the old lease credits
// nothing.
func TestLendExpiredLeaseIsCharged(t *testing.T) {
	ctx := context.Background()
	for _, p := range lendPolicies {
		t.Run(p.Name, func(t *testing.T) {
			clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
			s := lendStores(t, clock, 1)[0]
			a, err := s.LendForTest(ctx, "k", p, "a", false, 0, 0, -1, 5, lease)
			if err != nil {
				t.Fatal(err)
			}
			clock.Advance(lease)
			b, err := s.LendForTest(ctx, "k", p, "b", false, 0, 0, -1, 10, lease)
			if err != nil {
				t.Fatal(err)
			}
			if b.Granted != 5 || b.Holders != 1 {
				t.Fatalf("after a's lease ended: %+v, want 5 granted (a's 5 charged), 1 holder", b)
			}
			if _, err := s.LendForTest(ctx, "k", p, "a", true, a.Seq, 0, -1, 0, lease); err != nil {
				t.Fatal(err)
			}
			c, err := s.LendForTest(ctx, "k", p, "c", false, 0, 0, -1, 10, lease)
			if err != nil {
				t.Fatal(err)
			}
			if c.Granted != 0 {
				t.Fatalf("after a's late return: %+v, want nothing granted", c)
			}
		})
	}
}

// TestLendExactAcrossHolders: three stores on three clients take, spend and
// renew concurrently; the units granted in all never exceed the limit, and
// since every unit is reported spent, all of it is granted in the end.
func TestLendExactAcrossHolders(t *testing.T) {
	ctx := context.Background()
	for _, p := range lendPolicies {
		t.Run(p.Name, func(t *testing.T) {
			p := p
			p.Limit = 1000
			stores := lendStores(t, limittest.NewClock(time.Unix(1_700_000_000, 0)), 3)
			var mu sync.Mutex
			total := int64(0)
			var wg sync.WaitGroup
			errc := make(chan error, 3*4)
			for i, s := range stores {
				for g := range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						holder := string(rune('a'+i)) + string(rune('0'+g))
						var seq, held int64
						for range 200 {
							r, err := s.LendForTest(ctx, "k", p, holder, false, seq, held, -1, 7, time.Hour)
							if err != nil {
								errc <- err
								return
							}
							mu.Lock()
							total += r.Granted
							mu.Unlock()
							// Everything held is spent before the next call,
							// which reports it.
							seq, held = r.Seq, r.Granted
						}
					}()
				}
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
			if total != p.Limit {
				t.Fatalf("granted %d in all across 12 holders, want exactly the limit %d", total, p.Limit)
			}
		})
	}
}

func TestLendRefusesRollingWindow(t *testing.T) {
	s := lendStores(t, nil, 1)[0]
	_, err := s.LendForTest(context.Background(), "k", limit.RollingWindow(10, time.Second).Named("rw"),
		"a", false, 0, 0, -1, 1, lease)
	var pe *limit.PolicyError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want a *limit.PolicyError", err)
	}
}

// TestOneTripSeesLentUnits checks that the one-trip decisions (AllowN,
// AllowAll, Settle, Reset) count what other holders hold, keep the ledger,
// and charge a lease that ended.
func TestOneTripSeesLentUnits(t *testing.T) {
	ctx := context.Background()
	for _, p := range lendPolicies {
		t.Run(p.Name, func(t *testing.T) {
			clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
			s := lendStores(t, clock, 1)[0]
			if _, err := s.LendForTest(ctx, "k", p, "a", false, 0, 0, -1, 6, lease); err != nil {
				t.Fatal(err)
			}
			allow := func(cost int64, all bool) bool {
				t.Helper()
				var dec limit.Decision
				var err error
				if all {
					var out []limit.Decision
					out, err = s.AllowAll(ctx, []limit.Request{{Key: "k", Policy: p, Cost: cost}}, nil)
					if err == nil {
						dec = out[0]
					}
				} else {
					dec, err = s.AllowN(ctx, "k", p, cost)
				}
				if err != nil {
					t.Fatal(err)
				}
				return dec.Allowed
			}
			if allow(5, false) || allow(5, true) {
				t.Fatal("5 allowed with 6 of 10 lent")
			}
			if !allow(2, false) || !allow(2, true) {
				t.Fatal("2 and 2 refused with 6 of 10 lent")
			}
			// The ledger survived the writes: 10 - 6 - 4 = 0 left.
			if allow(1, false) {
				t.Fatal("1 allowed with 6 lent and 4 spent")
			}
			if err := s.Reset(ctx, "k", p); err != nil {
				t.Fatal(err)
			}
			if allow(5, true) || !allow(4, false) {
				t.Fatal("after Reset, the 6 lent units must still count")
			}
			if _, err := s.Settle(ctx, "k", p, -4); err != nil {
				t.Fatal(err)
			}
			clock.Advance(lease)
			// a's lease ended: its 6 are charged, the refund gave 4 back.
			if allow(5, false) || !allow(4, false) {
				t.Fatal("after a's lease ended: want 4 left")
			}
		})
	}
}

// TestLeaseReportOutOfRange: a report of a lease's spends is charged as no
// more than the limit and no less than nothing, by both scripts that end
// leases (allow.lua for cold leases, allowance.lua for allowances), so that
// a holder's bookkeeping gone wrong can neither hold a key refused for
// years (nor fail the script, the call and the decisions sharing it) nor
// free units already spent.
func TestLeaseReportOutOfRange(t *testing.T) {
	ctx := context.Background()
	policies := []limit.Policy{
		// A token weighing one unit (the state holds µs of debt), and
		// two weighing many.
		limit.TokenBucket(1000, limit.PerSecond(1_000_000)).Named("tb-1us"),
		limit.TokenBucket(1000, limit.PerSecond(7851)).Named("tb"),
		limit.GCRA(limit.PerSecond(7851), 1000).Named("gcra"),
	}
	ends := map[string]func(s *redislimit.Store, key string, p limit.Policy, used int64) error{
		"allow.lua": func(s *redislimit.Store, key string, p limit.Policy, used int64) error {
			_, err := s.EndLeaseForTest(ctx, key, p, 777, used)
			return err
		},
		"allowance.lua": func(s *redislimit.Store, key string, p limit.Policy, used int64) error {
			_, err := s.LendForTest(ctx, key, p, "h", true, 777, used, -1, 0, lease)
			return err
		},
	}
	for script, end := range ends {
		for _, p := range policies {
			t.Run(script+"/"+p.Name, func(t *testing.T) {
				clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
				s := lendStores(t, clock, 1)[0]
				free := func(key string) int64 {
					t.Helper()
					d, err := s.AllowN(ctx, key, p, 0)
					if err != nil {
						t.Fatal(err)
					}
					return d.Remaining
				}
				// Far past the limit, as an ended lease's remainder read
				// as units would be.
				if err := end(s, "big", p, 1<<62); err != nil {
					t.Fatalf("a report of 2^62 units: %v", err)
				}
				if got := free("big"); got != 0 {
					t.Fatalf("after a report of 2^62 units: %d free, want 0 (charged as the limit)", got)
				}
				clock.Advance(time.Second) // the limit refills within it
				if got := free("big"); got != p.Limit {
					t.Fatalf("a second after a report of 2^62 units: %d free, want %d", got, p.Limit)
				}
				// Negative: nothing is given back.
				if d, err := s.AllowN(ctx, "neg", p, p.Limit); err != nil || !d.Allowed {
					t.Fatalf("spending the limit: %+v %v", d, err)
				}
				if err := end(s, "neg", p, -p.Limit); err != nil {
					t.Fatal(err)
				}
				if got := free("neg"); got != 0 {
					t.Fatalf("after a report of %d units: %d free, want 0", -p.Limit, got)
				}
			})
		}
	}
}

// TestEndedLeasesChargedInEndOrder: a lease taken after a longer one may
// end first, so a state's ledger is not always in the order its leases
// end. Both scripts that read a ledger (allow.lua for one-trip decisions,
// allowance.lua for takes) charge the leases that have ended in the order
// they ended: charged the other way round, the earlier lease's units would
// count from the later end and the key would stay refused longer than its
// rule says.
func TestEndedLeasesChargedInEndOrder(t *testing.T) {
	ctx := context.Background()
	readers := map[string]func(s *redislimit.Store, p limit.Policy) (int64, error){
		"allow.lua": func(s *redislimit.Store, p limit.Policy) (int64, error) {
			d, err := s.EndLeaseForTest(ctx, "k", p, 0, 0)
			return d.Remaining, err
		},
		"allowance.lua": func(s *redislimit.Store, p limit.Policy) (int64, error) {
			l, err := s.LendForTest(ctx, "k", p, "c", false, 0, 0, -1, 0, time.Second)
			return l.Remaining, err
		},
	}
	for script, read := range readers {
		t.Run(script, func(t *testing.T) {
			clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
			s := lendStores(t, clock, 1)[0]
			p := limit.TokenBucket(100, limit.PerSecond(1)).Named("tb")
			if a, err := s.LendForTest(ctx, "k", p, "a", false, 0, 0, -1, 10, time.Minute); err != nil || a.Granted != 10 {
				t.Fatalf("a's take: %+v %v, want 10 granted", a, err)
			}
			if b, err := s.LendForTest(ctx, "k", p, "b", false, 0, 0, -1, 10, time.Second); err != nil || b.Granted != 10 {
				t.Fatalf("b's take: %+v %v, want 10 granted", b, err)
			}
			clock.Advance(61 * time.Second)
			// b's 10 units are charged at its end (1 s) and drain by 11 s;
			// a's 10 at 60 s, 9 of them still owed at 61 s.
			got, err := read(s, p)
			if err != nil {
				t.Fatal(err)
			}
			if got != 91 {
				t.Fatalf("a second after the later lease ended: %d remaining, want 91", got)
			}
		})
	}
}
