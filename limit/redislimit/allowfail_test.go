package redislimit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/limit/redislimit"
)

// lateHook moves a fake clock forward once, after the command that follows
// its arming has been answered: an answer that arrives late.
type lateHook struct {
	clock *limittest.Clock
	by    time.Duration
	armed atomic.Bool
}

func (h *lateHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.armed.CompareAndSwap(true, false) {
			h.clock.Advance(h.by)
		}
		return err
	}
}

func (h *lateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// makeHot makes key hot at s under p: its next decision there takes an
// allowance.
func makeHot(t *testing.T, s *redislimit.Store, key string, p limit.Policy) {
	t.Helper()
	s.MakeHotForTest(key, p)
}

// drain spends cost 1 on key from s until a decision is denied and returns
// how many were allowed.
func drain(t *testing.T, s limit.Store, key string, p limit.Policy) int64 {
	t.Helper()
	n := int64(0)
	for {
		dec, err := s.AllowN(context.Background(), key, p, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !dec.Allowed {
			return n
		}
		n++
	}
}

// TestAllowanceLateAnswerIsNotSpent: a grant whose answer arrives after
// its lease (and, on a window, after the window) has ended is not spent:
// its units were, or will be, charged at the lease's end, and the window
// they were counted in is over. The decision takes the one-trip path.
func TestAllowanceLateAnswerIsNotSpent(t *testing.T) {
	for _, tc := range []struct {
		p     limit.Policy
		start time.Duration // into the window
		late  time.Duration
	}{
		// Charged at its end, 100ms in, the grant of 10 would have drained
		// to 1 by the time it is spent: 9 more for the others.
		{limit.TokenBucket(10, limit.PerSecond(10)).Named("tb"), 0, time.Second},
		// Counted in the window that ends 200ms later, spent in the next.
		{limit.FixedWindow(10, time.Second).Named("fw"), 800 * time.Millisecond, 300 * time.Millisecond},
		{limit.SlidingWindow(10, time.Second).Named("sw"), 800 * time.Millisecond, 1300 * time.Millisecond},
	} {
		t.Run(tc.p.Name, func(t *testing.T) {
			clock := limittest.NewClock(windowStart.Add(tc.start))
			c := connect(t)
			prefix := testPrefix(t, c)
			hook := &lateHook{clock: clock, by: tc.late}
			c.AddHook(hook)
			a, err := redislimit.New(c, redislimit.Options{Prefix: prefix, Clock: clock, LocalAllowance: true,
				AllowanceLease: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = a.Close(context.Background()) })
			b, err := redislimit.New(connect(t), redislimit.Options{Prefix: prefix, Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			makeHot(t, a, "k", tc.p)
			hook.armed.Store(true)
			dec, err := a.AllowN(context.Background(), "k", tc.p, 10)
			if err != nil {
				t.Fatal(err)
			}
			admitted := drain(t, b, "k", tc.p)
			if dec.Allowed {
				admitted += 10
			}
			if admitted > tc.p.Limit {
				t.Fatalf("admitted %d at one instant (the late grant's 10 included: %v), over the limit %d",
					admitted, dec.Allowed, tc.p.Limit)
			}
		})
	}
}

// TestAllowanceWindowDeadStore: a store that dies holding units of a
// window loses them until the window ends (they stay counted, the lease
// ends unreported), and the next window has its whole limit.
func TestAllowanceWindowDeadStore(t *testing.T) {
	for _, p := range []limit.Policy{
		limit.FixedWindow(500, time.Minute).Named("fw"),
		limit.SlidingWindow(500, time.Minute).Named("sw"),
	} {
		t.Run(p.Name, func(t *testing.T) {
			clock := limittest.NewClock(time.Unix(1_700_000_040, 0)) // a minute's start
			stores := allowanceStores(t, clock, 3)
			for _, s := range stores {
				makeHot(t, s, "hot", p)
			}
			got := admit(t, stores[:1], p, 1, 10)
			got += admit(t, stores, p, 4, 30)
			held := stores[0].KillForTest()
			if held == 0 {
				t.Fatal("the dead store held nothing: the test needs it to hold units")
			}
			for _, s := range stores[1:] {
				if err := s.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			before := drainRest(t, stores[1], p)
			clock.Advance(2 * time.Second) // past the lease: the units stay counted
			after := drainRest(t, stores[1], p)
			if lost := p.Limit - got - before - after; lost != held || after != 0 {
				t.Fatalf("admitted %d+%d+%d of %d: lost %d, want exactly the %d units the dead store held",
					got, before, after, p.Limit, lost, held)
			}
			t.Logf("%s: dead store held %d of %d; lost until the window ends", p.Name, held, p.Limit)
			clock.Advance(time.Minute) // the next window
			next := drainRest(t, stores[1], p)
			want := p.Limit
			if p.Algorithm == limit.SlidingWindowAlgorithm {
				// 2s into the window, the last one's count weighs 58/60.
				want = p.Limit - (p.Limit*58+59)/60
			}
			if next != want {
				t.Fatalf("next window: admitted %d, want %d", next, want)
			}
		})
	}
}

// restartPair starts a Redis server of the test's own and returns a store
// with allowances and a one-trip store on it, on clock.
func restartPair(t *testing.T, clock limit.Clock) (*redistest.Server, *redislimit.Store, *redislimit.Store, func()) {
	t.Helper()
	srv := redistest.StartServer(t)
	ca, cb := srv.Client(t), srv.Client(t)
	a, err := redislimit.New(ca, redislimit.Options{Prefix: "r:", Clock: clock, LocalAllowance: true,
		AllowanceLease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = a.Close(ctx)
	})
	b, err := redislimit.New(cb, redislimit.Options{Prefix: "r:", Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	reconnect := func() {
		for _, c := range []*redis.Client{ca, cb} {
			deadline := time.Now().Add(10 * time.Second)
			for c.Ping(context.Background()).Err() != nil {
				if time.Now().After(deadline) {
					t.Fatal("no answer from the restarted server")
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	return srv, a, b, reconnect
}

// TestAllowanceRedisRestartedEmpty: Redis restarts empty while a store
// holds units. Before the restart the key's state counted them (lent);
// after it, the holder spends what it holds until its next call, which
// reports those spends to the new state. So a holder that calls before the
// others fill the new state admits nothing beyond the limit after the
// restart; one that spends after they have filled it admits at most what
// it held. Across the restart the total stays within what the old state
// counted plus one limit: the bound of the one-trip path, whose restart
// forgets the old state the same way.
func TestAllowanceRedisRestartedEmpty(t *testing.T) {
	for _, p := range []limit.Policy{
		limit.TokenBucket(100, limit.PerHour(1)).Named("tb"),
		limit.FixedWindow(100, time.Hour).Named("fw"),
		limit.SlidingWindow(100, time.Hour).Named("sw"),
	} {
		for _, mode := range []string{"holder spends first", "holder renews first", "one-trip first"} {
			t.Run(p.Name+"/"+mode, func(t *testing.T) {
				clock := limittest.NewClock(time.Unix(1_699_999_200, 0)) // an hour's start
				srv, a, b, reconnect := restartPair(t, clock)
				makeHot(t, a, "k", p)
				a1 := drainN(t, a, p, 20)
				a.WaitSettledForTest()
				held := a.HeldUnitsForTest()
				b1 := drain(t, b, "k", p)
				if a1+b1+held != p.Limit || held == 0 {
					t.Fatalf("before the restart: %d + %d admitted, %d held, want the limit %d in all, some held",
						a1, b1, held, p.Limit)
				}
				srv.Restart(t)
				reconnect()
				var after int64
				switch mode {
				case "holder spends first":
					after += drainN(t, a, p, held+20) // the units held, then a call
					after += drain(t, b, "k", p)
				case "holder renews first":
					// A cost over what it holds: a call that finds the lease
					// gone. The units held stay unspent from then on.
					dec, err := a.AllowN(context.Background(), "k", p, held+1)
					if err != nil {
						t.Fatal(err)
					}
					if dec.Allowed {
						after += held + 1
					}
					after += drainN(t, a, p, 2*held)
					after += drain(t, b, "k", p)
				default:
					after += drain(t, b, "k", p)
					after += drainN(t, a, p, held+20)
				}
				t.Logf("held %d at the restart; admitted %d before, %d after (limit %d)", held, a1+b1, after, p.Limit)
				if mode != "one-trip first" && after > p.Limit {
					t.Fatalf("after the restart: %d admitted, over the limit %d", after, p.Limit)
				}
				if after > p.Limit+held || a1+b1+after > 2*p.Limit {
					t.Fatalf("after the restart: %d admitted, over the limit %d plus the %d held", after, p.Limit, held)
				}
			})
		}
	}
}

// TestAllowanceRefusingThenRedisRestartedEmpty: Redis restarts empty while
// a store refuses a hot key locally, its last call denied with the limit
// spent. Within a period (half the lease) the store asks Redis again and
// then admits the new state's whole limit, as the one-trip path does (the
// bucket less the spends its last report carries); refusing until the old
// state's retry time (a window's end, an hour for the bucket's next token)
// would lose it.
func TestAllowanceRefusingThenRedisRestartedEmpty(t *testing.T) {
	for _, p := range []limit.Policy{
		limit.TokenBucket(100, limit.PerHour(1)).Named("tb"),
		limit.FixedWindow(100, time.Hour).Named("fw"),
		limit.SlidingWindow(100, time.Hour).Named("sw"),
	} {
		t.Run(p.Name, func(t *testing.T) {
			clock := limittest.NewClock(time.Unix(1_699_999_200, 0).Add(time.Minute))
			srv, a, _, reconnect := restartPair(t, clock)
			makeHot(t, a, "k", p)
			if before := drain(t, a, "k", p); before != p.Limit {
				t.Fatalf("before the restart: %d admitted, want the limit %d", before, p.Limit)
			}
			srv.Restart(t)
			reconnect()
			// A decision every 50 ms for a period (half the 1-s lease), so
			// that the key stays warm and its record is kept, then a drain.
			var after int64
			for range 10 {
				after += drainN(t, a, p, 1)
				clock.Advance(50 * time.Millisecond)
			}
			after += drainN(t, a, p, 2*p.Limit)
			t.Logf("admitted %d after the restart (limit %d); %+v", after, p.Limit, a.AllowanceStats())
			// The bucket's last short take may have spends not yet reported:
			// the new state is charged for them (one report, at most a share,
			// DESIGN-allowances.md 2.4 and 2.5); the windows report none.
			lo := p.Limit
			if p.Name == "tb" {
				lo = p.Limit - p.Limit/2
			}
			if after > p.Limit || after < lo {
				t.Fatalf("a period after the restart: %d admitted, want the new state's limit %d (at least %d)", after, p.Limit, lo)
			}
		})
	}
}

// drainN decides cost 1 on "k" n times from s and returns how many were
// allowed.
func drainN(t *testing.T, s *redislimit.Store, p limit.Policy, n int64) int64 {
	t.Helper()
	got := int64(0)
	for range n {
		dec, err := s.AllowN(context.Background(), "k", p, 1)
		if err != nil {
			t.Fatal(err)
		}
		if dec.Allowed {
			got++
		}
	}
	return got
}

// TestAllowanceRedisFrozen: Redis stops answering (SIGSTOP) while a store
// holds units: its decisions go on from them, locally, until its lease
// ends; then they fail as the store fails without allowances, within the
// caller's timeout.
func TestAllowanceRedisFrozen(t *testing.T) {
	const (
		leaseFor = time.Second
		timeout  = 100 * time.Millisecond
	)
	srv := redistest.StartServer(t)
	s, err := redislimit.New(srv.Client(t), redislimit.Options{Prefix: "f:", LocalAllowance: true,
		AllowanceLease: leaseFor})
	if err != nil {
		t.Fatal(err)
	}
	p := limit.TokenBucket(100_000, limit.PerHour(1)).Named("tb")
	decide := func() (limit.Decision, time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := time.Now()
		dec, err := s.AllowN(ctx, "k", p, 1)
		return dec, time.Since(start), err
	}
	// A fast warm-up: the store learns a high rate and takes a large
	// allowance.
	makeHot(t, s, "k", p)
	for start := time.Now(); time.Since(start) < 300*time.Millisecond; {
		if _, _, err := decide(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Microsecond)
	}
	s.WaitSettledForTest()
	held := s.HeldUnitsForTest()
	if held < 2 {
		t.Fatalf("held %d after the warm-up, want an allowance", held)
	}
	// Decisions paced so that what is held outlasts the lease.
	pace := max(5*time.Millisecond, 2*leaseFor/time.Duration(held))
	srv.Freeze(t)
	frozeAt := time.Now()
	thawed := false
	defer func() {
		if !thawed {
			srv.Thaw(t)
		}
	}()
	var local int64
	var firstErr time.Duration
	var slowest time.Duration
	for errs := 0; errs < 5; {
		dec, took, err := decide()
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("error %v, want the caller's deadline", err)
			}
			if firstErr == 0 {
				firstErr = time.Since(frozeAt)
			}
			slowest = max(slowest, took)
			errs++
			continue
		}
		if firstErr != 0 {
			t.Fatal("a decision succeeded on a frozen server after the allowance ran out")
		}
		if !dec.Allowed {
			t.Fatal("a decision from the allowance was denied")
		}
		local++
		time.Sleep(pace)
	}
	srv.Thaw(t)
	thawed = true
	t.Logf("Redis frozen holding %d units: %d decisions (one per %v) served from the allowance for %v, then errors within %v (timeout %v)",
		held, local, pace, firstErr.Round(time.Millisecond), slowest.Round(time.Millisecond), timeout)
	if local == 0 {
		t.Fatal("no decision served from the allowance while Redis was frozen")
	}
	if firstErr > leaseFor+timeout+boundMargin {
		t.Fatalf("decisions went on %v into the freeze, past the lease of %v", firstErr, leaseFor)
	}
	if slowest > timeout+boundMargin {
		t.Fatalf("a failing decision took %v, over its timeout %v", slowest, timeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestAllowanceTakeOutlivesItsCaller: a decision that needs a take, sent
// to a frozen server, returns its caller's error at the caller's deadline,
// and the take goes on. Once the server resumes, its answer is taken in:
// what it granted, and the remainder the store set aside for it, are the
// store's to spend, not stranded in Redis until the lease ends. The next
// decisions spend from the allowance, nothing expires, and after Close
// the state holds exactly the decisions admitted. A take that ended with
// its caller left the units lent under a lease the store no longer knew.
func TestAllowanceTakeOutlivesItsCaller(t *testing.T) {
	srv := redistest.StartServer(t)
	clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
	s, err := redislimit.New(srv.Client(t), redislimit.Options{Prefix: "t:", LocalAllowance: true,
		AllowanceLease: time.Second, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	p := limit.TokenBucket(1000, limit.PerHour(1)).Named("tb") // nothing refills on the fake clock
	warm(t, clock, []*redislimit.Store{s}, "hot", p, time.Second)
	var admitted int64
	if dec, err := s.AllowN(context.Background(), "hot", p, 1); err != nil || !dec.Allowed {
		t.Fatalf("first decision on the hot key: %+v, %v", dec, err)
	}
	admitted++
	held := s.HeldUnitsForTest()
	if held < 1 {
		t.Fatalf("held %d after the first decision, want an allowance", held)
	}

	thaw := giveUpOnFrozen(t, srv, s, "hot", p, held+1) // more than the remainder: a take
	if !s.CallInFlightForTest("hot", p) {
		t.Fatal("the take ended with its caller")
	}
	thaw()
	for deadline := time.Now().Add(5 * time.Second); s.CallInFlightForTest("hot", p); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the take was not answered within 5 s of the thaw")
		}
	}
	if st := s.AllowanceStats(); st.Expired != 0 {
		t.Fatalf("%d units expired: the take's answer was not taken in (%+v)", st.Expired, st)
	}
	if got := s.HeldUnitsForTest(); got <= held {
		t.Fatalf("held %d after the take's answer, want more than the %d set aside for it", got, held)
	}
	before := s.AllowanceStats().Local
	for range 20 {
		dec, err := s.AllowN(context.Background(), "hot", p, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !dec.Allowed {
			t.Fatal("a decision refused with the take's units held")
		}
		admitted++
	}
	if n := s.AllowanceStats().Local - before; n != 20 {
		t.Fatalf("%d of 20 decisions after the take answered from the allowance, want all", n)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if free, want := freeOn(t, srv, "t:", clock, "hot", p), p.Limit-admitted; free != want {
		t.Fatalf("after Close the state has %d free, want %d (limit %d, %d admitted)", free, want, p.Limit, admitted)
	}
}

// giveUpOnFrozen freezes srv and decides cost on key from s with a 100-ms
// deadline, which the decision must meet with the deadline's error; it
// returns the thaw (also run at cleanup, if not before).
func giveUpOnFrozen(t *testing.T, srv *redistest.Server, s *redislimit.Store, key string, p limit.Policy, cost int64) (thaw func()) {
	t.Helper()
	const timeout = 100 * time.Millisecond
	srv.Freeze(t)
	var thawed atomic.Bool
	thaw = func() {
		if !thawed.Swap(true) {
			srv.Thaw(t)
		}
	}
	t.Cleanup(thaw)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	_, err := s.AllowN(ctx, key, p, cost)
	if took := time.Since(start); took > timeout+boundMargin {
		t.Fatalf("the decision took %v, over its caller's deadline of %v", took, timeout)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a decision on a frozen server: %v, want the caller's deadline", err)
	}
	return thaw
}

// freeOn is what key's state under p on srv (prefix, clock) has free.
func freeOn(t *testing.T, srv *redistest.Server, prefix string, clock limit.Clock, key string, p limit.Policy) int64 {
	t.Helper()
	reader, err := redislimit.New(srv.Client(t), redislimit.Options{Prefix: prefix, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	dec, err := reader.AllowN(context.Background(), key, p, 0)
	if err != nil {
		t.Fatal(err)
	}
	return dec.Remaining
}

// coldAskStore is a store on c with local allowances and 1-minute cold
// leases (opts adds the rest; its Prefix is prefix), on a fake clock, with
// a connection made; closed at the test's end. p is the policy the cold-ask
// tests decide under: nothing refills on the fake clock.
func coldAskStore(t *testing.T, c *redis.Client, prefix string, opts redislimit.Options) (s *redislimit.Store, p limit.Policy, clock *limittest.Clock) {
	t.Helper()
	clock = limittest.NewClock(time.Unix(1_700_000_000, 0))
	opts.Prefix, opts.LocalAllowance, opts.ColdLease, opts.Clock = prefix, true, time.Minute, clock
	s, err := redislimit.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	p = limit.TokenBucket(1000, limit.PerHour(1)).Named("tb")
	if _, err := s.AllowN(context.Background(), "other", p, 0); err != nil {
		t.Fatal(err)
	}
	return s, p, clock
}

// TestColdLeaseAskOutlivesItsCaller: a one-trip decision that asks for a
// cold lease, sent to a frozen server, returns its caller's error at the
// caller's deadline; once the server resumes, the answer is taken in and
// the lease it lent is the store's to spend, rather than lent in Redis
// until its end. The next decisions spend from it, and after Close the
// state holds exactly the decisions admitted, plus the one whose caller
// left (Redis applied it, as any call already written). Batched, and sent
// alone (MaxBatch 1; on a client without ContextTimeoutEnabled, go-redis's
// default, which reads the answer past the caller's deadline: with it,
// go-redis ends the read at the deadline, and the answer is lost to the
// store as before).
func TestColdLeaseAskOutlivesItsCaller(t *testing.T) {
	for _, tc := range []struct {
		name       string
		maxBatch   int
		ctxTimeout bool // the client's ContextTimeoutEnabled
	}{{"batched", 0, false}, {"batched, ContextTimeoutEnabled", 0, true}, {"alone", 1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			srv, c := frozen(t)
			if tc.ctxTimeout {
				c = srv.Client(t)
			}
			s, p, clock := coldAskStore(t, c, "a:", redislimit.Options{MaxBatch: tc.maxBatch})

			giveUpOnFrozen(t, srv, s, "k", p, 1)() // the key's first decision asks for a lease
			for deadline := time.Now().Add(5 * time.Second); s.AllowanceStats().ColdLeases != 1; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("no cold lease 5 s after the thaw: the ask's answer was not taken in (%+v)", s.AllowanceStats())
				}
			}
			before := s.AllowanceStats()
			admitted := int64(0)
			for range 5 {
				dec, err := s.AllowN(context.Background(), "k", p, 1)
				if err != nil {
					t.Fatal(err)
				}
				if !dec.Allowed {
					t.Fatal("a decision refused with a cold lease held")
				}
				admitted++
			}
			after := s.AllowanceStats()
			if n := after.ColdLocal - before.ColdLocal; n != 5 {
				t.Fatalf("%d of 5 decisions answered from the cold lease, want all (%+v)", n, after)
			}
			if err := s.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if st := s.AllowanceStats(); st.Expired != 0 {
				t.Fatalf("%d units expired (%+v)", st.Expired, st)
			}
			if free, want := freeOn(t, srv, "a:", clock, "k", p), p.Limit-admitted-1; free != want {
				t.Fatalf("after Close the state has %d free, want %d (limit %d, %d admitted, and the decision whose caller left)",
					free, want, p.Limit, admitted)
			}
		})
	}
}

// TestColdLeaseAskCloseWaits: Close waits for the answer to an ask whose
// caller left: the store closed on a frozen server, the ask's place is
// free when Close returns (its batch ended by its own bound, the ask was
// settled), not held by a goroutine still waiting.
func TestColdLeaseAskCloseWaits(t *testing.T) {
	srv := redistest.StartServer(t)
	s, p, _ := coldAskStore(t, srv.Client(t), "w:", redislimit.Options{})
	thaw := giveUpOnFrozen(t, srv, s, "k", p, 1) // the key's first decision asks for a lease
	defer thaw()
	if places, _ := s.ColdPlacesForTest(); places != 1 {
		t.Fatalf("%d places taken once the caller left, want 1: its ask's", places)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = s.Close(ctx) // on a frozen server: the error is not what is checked
	if places, held := s.ColdPlacesForTest(); places != 0 || held != 0 {
		t.Fatalf("after Close, %d places taken and %d leases held, want none: Close did not wait for the ask", places, held)
	}
}

// TestColdLeaseAskPlacesFull: with every place of the early renewals and
// late answers taken (ColdRenewalPlaces calls in flight), a caller that
// gives up on an ask for a cold lease still returns at its deadline, the
// store takes no place beyond the bound, and the ask is settled as before
// late answers existed: its place given up, no lease held here, and the
// units Redis lent it lent there until the lease's end. Batched and sent
// alone.
func TestColdLeaseAskPlacesFull(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxBatch int
	}{{"batched", 0}, {"alone", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			srv, c := frozen(t)
			s, p, clock := coldAskStore(t, c, "f:", redislimit.Options{MaxBatch: tc.maxBatch})
			n, release := s.HoldColdRenewalPlacesForTest()
			defer release() // before Close, which waits for every place
			if n != redislimit.ColdRenewalPlaces {
				t.Fatalf("took %d places, want all %d free", n, redislimit.ColdRenewalPlaces)
			}
			giveUpOnFrozen(t, srv, s, "k", p, 1)() // the key's first decision asks for a lease
			if inFlight := s.ColdRenewalsInFlightForTest(); inFlight != redislimit.ColdRenewalPlaces {
				t.Fatalf("%d places taken, want the bound, %d", inFlight, redislimit.ColdRenewalPlaces)
			}
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
				if places, _ := s.ColdPlacesForTest(); places == 0 {
					break
				}
				if time.Now().After(deadline) {
					places, held := s.ColdPlacesForTest()
					t.Fatalf("5 s after the thaw %d lease places taken and %d leases held, want none: the answer waited for with no place free, or the ask never settled", places, held)
				}
			}
			release()
			if st := s.AllowanceStats(); st.ColdLeases != 0 {
				t.Fatalf("%d cold leases held: an answer taken in with no place to wait for it (%+v)", st.ColdLeases, st)
			}
			// Redis applied the decision and lent the lease, which no one
			// here holds: its units stay lent until its end.
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				free := freeOn(t, srv, "f:", clock, "k", p)
				if free < p.Limit-1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the state has %d free of %d after the decision whose caller left: no lease was lent, so the test shows nothing", free, p.Limit)
				}
			}
			dec, err := s.AllowN(context.Background(), "k", p, 1)
			if err != nil || !dec.Allowed {
				t.Fatalf("a decision once the places are free: %+v, %v", dec, err)
			}
		})
	}
}

// TestColdLeaseAskDroppedByItsBatch: a batched ask for a cold lease whose
// caller leaves while it waits behind a batch in flight, and which the
// next batch drops, its context ended, before the caller does: the call
// was never sent, so no answer is waited for. The caller returns at its
// deadline, the ask's place is given up, and Close returns at once, where
// it used to wait for ever for an answer to a call never sent.
func TestColdLeaseAskDroppedByItsBatch(t *testing.T) {
	srv, c := frozen(t)
	s, p, clock := coldAskStore(t, c, "d:", redislimit.Options{MaxInFlight: 1})
	srv.Freeze(t)
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			srv.Thaw(t)
		}
	}
	defer thaw()
	// The one batch allowed in flight, held by the frozen server.
	sent := s.AllowanceStats().Commands
	blocker := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := s.AllowN(ctx, "blocker", p, 0)
		blocker <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); s.AllowanceStats().Commands == sent; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the blocking batch was not sent within 5 s")
		}
	}
	// The ask waits behind it; when its caller leaves, the server thaws,
	// and the next batch drops the call before the caller does.
	left := false
	redislimit.SetCallerLeftHookForTest(t, s, func(queued func() bool) {
		left = true
		thaw()
		for deadline := time.Now().Add(5 * time.Second); queued(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Error("the next batch did not drop the call within 5 s")
				return
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := s.AllowN(ctx, "k", p, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the ask behind a frozen batch: %v, want its caller's deadline", err)
	}
	if !left {
		t.Fatal("the caller left without the hook: the call was not batched behind the blocker")
	}
	if err := <-blocker; err != nil {
		t.Fatalf("the blocking call: %v", err)
	}
	if places, held := s.ColdPlacesForTest(); places != 0 || held != 0 {
		t.Fatalf("%d lease places taken and %d leases held for a call never sent, want none", places, held)
	}
	if n := s.ColdRenewalsInFlightForTest(); n != 0 {
		t.Fatalf("%d late answers waited for, want none: the call was never sent", n)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close(context.Background()) }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close still waiting after 5 s, for the answer to a call never sent")
	}
	if free := freeOn(t, srv, "d:", clock, "k", p); free != p.Limit {
		t.Fatalf("the state has %d free of %d: a call dropped before it was sent was applied", free, p.Limit)
	}
}

// TestColdLeaseLateAnswerBounded: the store waits for the answer to an ask
// whose caller left for as long as for an early renewal, and no longer,
// whatever the client's timeouts: on a client without a read timeout,
// whose call to a frozen server never ends, the ask's place is given up
// within that bound, and Close returns. Batched and sent alone.
func TestColdLeaseLateAnswerBounded(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxBatch int
	}{{"batched", 0}, {"alone", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: -1})
			t.Cleanup(func() { c.Close() })
			s, p, _ := coldAskStore(t, c, "b:", redislimit.Options{AllowanceLease: time.Second, MaxBatch: tc.maxBatch})
			const bound = time.Second // AllowanceLease/2, at least 1 s
			asked := time.Now()
			thaw := giveUpOnFrozen(t, srv, s, "k", p, 1) // the key's first decision asks for a lease
			defer thaw()
			left := asked.Add(100 * time.Millisecond) // its caller's deadline: the wait starts no earlier
			for deadline := time.Now().Add(bound + 5*time.Second); ; time.Sleep(5 * time.Millisecond) {
				places, held := s.ColdPlacesForTest()
				if places == 0 && s.ColdRenewalsInFlightForTest() == 0 {
					if held != 0 {
						t.Fatalf("%d leases held from a frozen server", held)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%v after its caller left, on a server still frozen, the ask still waited for (%d places)", time.Since(left), places)
				}
			}
			if waited := time.Since(left); waited < bound {
				t.Fatalf("the answer was given up after %v, before the bound of %v", waited, bound)
			}
			closed := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				closed <- s.Close(ctx)
			}()
			select {
			case <-closed: // on a frozen server: the error is not what is checked
			case <-time.After(10 * time.Second):
				t.Fatal("Close still waiting after 10 s")
			}
		})
	}
}
