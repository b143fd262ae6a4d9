package redislimit_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/limit/redislimit"
)

// allowanceStores returns n stores with local allowances on n clients of
// the test server, closed at cleanup.
func allowanceStores(t *testing.T, clock limit.Clock, n int) []*redislimit.Store {
	t.Helper()
	return leasedStores(t, clock, n, time.Second)
}

// leasedStores is allowanceStores with allowances leased for lease.
func leasedStores(t *testing.T, clock limit.Clock, n int, lease time.Duration) []*redislimit.Store {
	t.Helper()
	return storesWith(t, n, redislimit.Options{Clock: clock, LocalAllowance: true, AllowanceLease: lease})
}

// storesWith returns n stores on one prefix of their own with opts, each
// on a client of its own, closed at cleanup.
func storesWith(t *testing.T, n int, opts redislimit.Options) []*redislimit.Store {
	t.Helper()
	out := make([]*redislimit.Store, n)
	for i := range out {
		c := connect(t)
		if i == 0 {
			opts.Prefix = testPrefix(t, c)
		}
		s, err := redislimit.New(c, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		out[i] = s
	}
	return out
}

// admit decides cost 1 on key from every store with callers goroutines each,
// decisions times per goroutine, and returns how many were allowed.
func admit(t *testing.T, stores []*redislimit.Store, p limit.Policy, callers, decisions int) int64 {
	t.Helper()
	var allowed atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, len(stores)*callers)
	for _, s := range stores {
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range decisions {
					dec, err := s.AllowN(context.Background(), "hot", p, 1)
					if err != nil {
						errc <- err
						return
					}
					if dec.Allowed {
						allowed.Add(1)
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
	return allowed.Load()
}

// warm makes key hot at every store: cost-0 decisions, enough of them in
// enough periods of half the lease (the clock moves lease/2 a period).
func warm(t *testing.T, clock *limittest.Clock, stores []*redislimit.Store, key string, p limit.Policy, lease time.Duration) {
	t.Helper()
	for range redislimit.WarmPeriods + 1 {
		for _, s := range stores {
			for range redislimit.HotThreshold {
				if _, err := s.AllowN(context.Background(), key, p, 0); err != nil {
					t.Fatal(err)
				}
			}
		}
		clock.Advance(lease / 2)
	}
}

// drainRest spends what is left of the key on the one-trip path.
func drainRest(t *testing.T, s *redislimit.Store, p limit.Policy) int64 {
	t.Helper()
	n := int64(0)
	for {
		dec, err := s.AllowAll(context.Background(), []limit.Request{{Key: "hot", Policy: p, Cost: 1}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !dec[0].Allowed {
			return n
		}
		n++
	}
}

// TestAllowanceExactAcrossStores: three stores decide one hot key
// concurrently, most decisions from their allowances; with a clock that
// does not move (nothing refills), they never admit more than the limit in
// all, and once they are closed nothing is lost: everything not admitted
// is back in Redis.
func TestAllowanceExactAcrossStores(t *testing.T) {
	for _, p := range []limit.Policy{
		limit.TokenBucket(500, limit.PerHour(1)).Named("tb"),
		limit.GCRA(limit.PerHour(1), 500).Named("gcra"),
	} {
		t.Run(p.Name, func(t *testing.T) {
			clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
			stores := allowanceStores(t, clock, 3)
			warm(t, clock, stores, "hot", p, time.Second)
			got := admit(t, stores, p, 8, 40) // 960 decisions on a limit of 500
			if st := stores[0].AllowanceStats(); st.Local == 0 || st.Lent == 0 {
				t.Fatalf("no decision was local: %+v", st)
			}
			if got > p.Limit {
				t.Fatalf("admitted %d across 3 stores, over the limit %d", got, p.Limit)
			}
			// Units still held are lent, not lost: after Close they are back.
			for _, s := range stores {
				if err := s.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if rest := drainRest(t, stores[0], p); got+rest != p.Limit {
				t.Fatalf("admitted %d, %d left after Close: %d lost", got, rest, p.Limit-got-rest)
			}
		})
	}
}

// TestAllowanceDecidedDuringGiveBack: a decision that arrives while Close
// is giving back the units it needs, with the rest of the limit spent by
// another store, waits for them and is admitted; sent to Redis at once, it
// would be refused.
func TestAllowanceDecidedDuringGiveBack(t *testing.T) {
	h := holdingUnits(t)
	var ans <-chan midwayAnswer
	redislimit.SetGiveBackHookForTest(func() { ans = h.decideMidway() })
	t.Cleanup(func() { redislimit.SetGiveBackHookForTest(nil) })
	if err := h.stores[0].Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.check(t, <-ans)
}

// TestAllowanceDecidedDuringCoolingGiveBack: the same, with the renewal
// goroutine giving back the allowance of a key that has cooled.
func TestAllowanceDecidedDuringCoolingGiveBack(t *testing.T) {
	h := holdingUnits(t)
	started := make(chan (<-chan midwayAnswer), 1)
	var once sync.Once
	redislimit.SetGivingBackHookForTest(t, func() {
		once.Do(func() { started <- h.decideMidway() })
	})
	// No decision for longer than a period (half the lease): cooled, with
	// the lease still on.
	h.clock.Advance(600 * time.Millisecond)
	select {
	case ans := <-started:
		h.check(t, <-ans)
	case <-time.After(10 * time.Second):
		t.Fatal("the cooled allowance was not given back")
	}
	if st := h.stores[0].AllowanceStats(); st.Returned != h.held || st.Expired != 0 {
		t.Errorf("stats %+v, want the %d held returned and none expired", st, h.held)
	}
}

// heldUnits is store 0 of two holding units of "hot", the rest of the
// limit spent by store 1.
type heldUnits struct {
	p      limit.Policy
	clock  *limittest.Clock
	stores []*redislimit.Store
	held   int64
}

func holdingUnits(t *testing.T) heldUnits {
	t.Helper()
	p := limit.TokenBucket(500, limit.PerHour(1)).Named("tb")
	clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
	stores := allowanceStores(t, clock, 2)
	warm(t, clock, stores[:1], "hot", p, time.Second)
	got := admit(t, stores[:1], p, 1, 10) // store 0 takes an allowance
	if err := stores[1].Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	got += drainRest(t, stores[1], p) // the other store spends the rest
	held := p.Limit - got
	if held < 2 {
		t.Fatalf("store 0 holds %d units: the test needs it to hold some", held)
	}
	return heldUnits{p: p, clock: clock, stores: stores, held: held}
}

type midwayAnswer struct {
	dec limit.Decision
	err error
}

// decideMidway starts a decision of store 0, called from a give-back's
// hook, and waits long enough for one sent straight to Redis to come back.
func (h heldUnits) decideMidway() <-chan midwayAnswer {
	ans := make(chan midwayAnswer, 1)
	go func() {
		dec, err := h.stores[0].AllowN(context.Background(), "hot", h.p, 1)
		ans <- midwayAnswer{dec, err}
	}()
	time.Sleep(100 * time.Millisecond)
	return ans
}

// check wants a admitted, and everything store 0 held back in Redis but
// the unit it admitted.
func (h heldUnits) check(t *testing.T, a midwayAnswer) {
	t.Helper()
	if a.err != nil || !a.dec.Allowed {
		t.Fatalf("decision during the give-back: %+v, %v; want allowed: %d units were being given back (%+v)",
			a.dec, a.err, h.held, h.stores[0].AllowanceStats())
	}
	if err := h.stores[0].Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rest := drainRest(t, h.stores[1], h.p); rest != h.held-1 {
		t.Errorf("%d units left after Close, want the %d held less the one admitted", rest, h.held)
	}
}

// TestAllowanceDeadStoreLosesItsAllowance: a store that stops without
// giving its units back (a dead process) loses exactly what it held
// unspent, once its lease ends; nothing is admitted twice.
func TestAllowanceDeadStoreLosesItsAllowance(t *testing.T) {
	p := limit.TokenBucket(500, limit.PerHour(1)).Named("tb")
	clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
	stores := allowanceStores(t, clock, 3)
	warm(t, clock, stores, "hot", p, time.Second)
	got := admit(t, stores[:1], p, 1, 10) // store 0 takes an allowance
	got += admit(t, stores, p, 4, 30)
	held := stores[0].KillForTest()
	if held == 0 {
		t.Fatal("the dead store held nothing: the test needs it to hold units")
	}
	// The live stores give their units back; the dead store's stay lent
	// until its lease ends.
	for _, s := range stores[1:] {
		if err := s.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	before := drainRest(t, stores[1], p)
	clock.Advance(2 * time.Second) // past the lease; an hour's refill is 0 units here
	after := drainRest(t, stores[1], p)
	if lost := p.Limit - got - before - after; lost != held {
		t.Fatalf("admitted %d+%d+%d of %d: lost %d, want exactly the %d units the dead store held",
			got, before, after, p.Limit, lost, held)
	}
}

func TestAllowanceOptions(t *testing.T) {
	c := connect(t)
	if _, err := redislimit.New(c, redislimit.Options{LocalAllowance: true, AllowanceLease: time.Millisecond}); err == nil {
		t.Fatal("a lease of 1ms was accepted")
	}
	s, err := redislimit.New(c, redislimit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("Close without allowances: %v", err)
	}
}

// scriptCounter counts the script calls a client sends.
type scriptCounter struct{ n atomic.Int64 }

func (h *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if n := cmd.Name(); n == "evalsha" || n == "eval" {
				h.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// TestAllowanceSizedInCostUnits: an allowance is sized from the cost
// decided on the key, not the number of decisions, so that decisions of a
// cost above 1 (limiterd's milli-tokens) still take several at a time.
func TestAllowanceSizedInCostUnits(t *testing.T) {
	c := connect(t)
	var calls scriptCounter
	c.AddHook(&calls)
	clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
	s, err := redislimit.New(c, redislimit.Options{Prefix: testPrefix(t, c), Clock: clock, LocalAllowance: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	p := limit.TokenBucket(10_000_000, limit.PerSecond(1)).Named("milli")
	const decisions = 400
	for i := range 1200 + decisions { // 1.2 s to become hot, then 400 counted
		if i == 1200 {
			calls.n.Store(0)
		}
		dec, err := s.AllowN(context.Background(), "k", p, 1000) // 10,000 decisions' worth in the bucket
		if err != nil {
			t.Fatal(err)
		}
		if !dec.Allowed {
			t.Fatal("refused with the bucket not spent")
		}
		clock.Advance(time.Millisecond) // 1000 decisions a second
	}
	if n := calls.n.Load(); n > decisions/10 {
		t.Fatalf("%d script calls for %d decisions of cost 1000 on a hot key: the allowance holds about one decision", n, decisions)
	}
}

// TestAllowanceDecisionsSkipShardLock: a key's allowance is found without
// its shard's lock, which every other key of the shard, and every new or
// cold key, takes: with the lock held, decisions on the held key go on
// (from its allowance), and one on a key of the same shard that has none
// waits until the lock is let go.
func TestAllowanceDecisionsSkipShardLock(t *testing.T) {
	ctx := context.Background()
	s, p := hotKeyStore(t)
	if keys, units := s.HeldForTest(); keys != 1 || units == 0 {
		t.Fatalf("after warming: %d allowances holding %d units, want 1 holding some", keys, units)
	}
	before := s.AllowanceStats()
	unlock := s.LockShardForTest("hot", p)
	answeredUnlocked(t, admitAsync(ctx, s, "hot", p, 10), unlock, "decisions on a key with an allowance")
	if got := s.AllowanceStats().Local - before.Local; got != 10 {
		unlock()
		t.Fatalf("%d decisions answered from the allowance, want 10", got)
	}
	// A cold key of the same shard: its decision needs the lock.
	other := sameShardKey(t, s, "hot", p)
	waitsForLock(t, unlock, "a key without an allowance, with its shard locked", func() error {
		_, err := s.AllowN(ctx, other, p, 1)
		return err
	})
}

// waitsForLock runs decide while a lock is held, fails when it returns
// before unlock is called (the test does not lock what decisions use),
// then unlocks and fails if decide does.
func waitsForLock(t *testing.T, unlock func(), what string, decide func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- decide() }()
	select {
	case err := <-done:
		unlock()
		t.Fatalf("%s was decided without waiting (err %v): the test does not lock what decisions use", what, err)
	case <-time.After(100 * time.Millisecond):
	}
	unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A decision that its key's allowance meets, or that the refusal the
// allowance last learned from Redis refuses, is answered without the
// allowance's lock: a take, renewal or slow decision holding it (or a
// holder descheduled by the machine) does not hold up the key's other
// decisions.
func TestAllowanceDecisionsSkipRecordLock(t *testing.T) {
	ctx := context.Background()
	s, p := hotKeyStore(t)
	_, units := s.HeldForTest()
	if units < 2 {
		t.Fatalf("after warming the allowance holds %d units, want 2 or more", units)
	}
	n := int(min(units, 10))
	// decided runs n decisions of cost on key with the allowance locked
	// and returns them, or fails when they wait for the lock.
	decided := func(n int, cost int64, what string) []limit.Decision {
		t.Helper()
		locked := s.LockAllowanceForTest("hot", p)
		if locked == nil {
			t.Fatal("the hot key has no allowance")
		}
		unlock := sync.OnceFunc(locked)
		defer unlock()
		type result struct {
			decs []limit.Decision
			err  error
		}
		done := make(chan result, 1)
		go func() {
			var r result
			for range n {
				dec, err := s.AllowN(ctx, "hot", p, cost)
				if err != nil {
					r.err = err
					break
				}
				r.decs = append(r.decs, dec)
			}
			done <- r
		}()
		select {
		case r := <-done:
			if r.err != nil {
				t.Fatal(r.err)
			}
			return r.decs
		case <-time.After(10 * time.Second):
			unlock()
			<-done
			t.Fatalf("%s waited for the allowance's lock", what)
		}
		return nil
	}
	before := s.AllowanceStats()
	for i, dec := range decided(n, 1, "decisions the remainder meets") {
		if !dec.Allowed {
			t.Fatalf("decision %d refused: %+v", i, dec)
		}
	}
	if got := s.AllowanceStats().Local - before.Local; got != int64(n) {
		t.Fatalf("%d decisions answered from the allowance, want %d", got, n)
	}
	// Spend the bucket: the allowance is refused a take and refuses
	// locally until the retry time Redis answered.
	var denied limit.Decision
	for range 2000 {
		dec, err := s.AllowN(ctx, "hot", p, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !dec.Allowed {
			denied = dec
			break
		}
	}
	if denied.Allowed || denied.RetryAfter <= 0 {
		t.Fatalf("the spent bucket never refused: %+v", denied)
	}
	before = s.AllowanceStats()
	for i, dec := range decided(5, 1, "decisions the last refusal refuses") {
		if dec.Allowed || dec.RetryAfter != denied.RetryAfter {
			t.Fatalf("decision %d at the same time: %+v, want refused with RetryAfter %v", i, dec, denied.RetryAfter)
		}
	}
	if got := s.AllowanceStats(); got.Local-before.Local != 5 || got.Commands != before.Commands {
		t.Fatalf("refusals: %d local, %d commands, want 5 and 0", got.Local-before.Local, got.Commands-before.Commands)
	}
	// A cost larger than the refusal covers needs the lock (a take): the
	// test locks what decisions use.
	waitsForLock(t, s.LockAllowanceForTest("hot", p), "a decision the refusal does not cover, with the allowance locked", func() error {
		_, err := s.AllowN(ctx, "hot", p, p.Limit)
		return err
	})
}

// hotKeyStore returns a store (fake clock, 1-s leases) whose key "hot"
// under the returned policy has an allowance, after one decision from it.
func hotKeyStore(t *testing.T) (*redislimit.Store, limit.Policy) {
	t.Helper()
	clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
	lease := time.Second
	s := leasedStores(t, clock, 1, lease)[0]
	p := limit.TokenBucket(1000, limit.PerSecond(1000))
	warm(t, clock, []*redislimit.Store{s}, "hot", p, lease)
	if dec, err := s.AllowN(context.Background(), "hot", p, 1); err != nil || !dec.Allowed {
		t.Fatalf("first decision on the hot key: %+v, %v", dec, err)
	}
	return s, p
}

// sameShardKey returns a key other than key whose allowance would be in
// the same shard.
func sameShardKey(t *testing.T, s *redislimit.Store, key string, p limit.Policy) string {
	t.Helper()
	want := s.ShardForTest(key, p)
	for i := range 1 << 20 {
		k := fmt.Sprintf("other-%d", i)
		if s.ShardForTest(k, p) == want {
			return k
		}
	}
	t.Fatal("no key in the same shard")
	return ""
}
