package redislimit

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
)

// Lease is the allowance script's answer, for the external tests.
type Lease struct {
	Granted, Seq, Holders, Remaining int64
	LeaseFor, Retry                  time.Duration
	Now                              int64
	Matched                          bool
}

// LendForTest runs the allowance script: take (ret false) or return.
func (s *Store) LendForTest(ctx context.Context, key string, p limit.Policy, holder string, ret bool,
	seq, used, spentAt, want int64, lease time.Duration) (Lease, error) {
	op := lendTake
	if ret {
		op = lendReturn
	}
	r, err := s.lend(ctx, key, p, lendRequest{op: op, holder: holder, seq: seq, used: used, spentAt: spentAt,
		want: want, lease: lease, held: -1})
	return Lease{Granted: r.granted, Seq: r.seq, Holders: r.holders, Remaining: r.remaining,
		LeaseFor: r.lease, Retry: r.retry, Now: r.now, Matched: r.matched}, err
}

// TakeGridForTest is takeGrid.
var TakeGridForTest = takeGrid

// LendOnGridForTest is LendForTest with the policy's take grid.
func (s *Store) LendOnGridForTest(ctx context.Context, key string, p limit.Policy, holder string,
	seq, used, spentAt, want int64, lease time.Duration) (Lease, error) {
	r, err := s.lend(ctx, key, p, lendRequest{op: lendTake, holder: holder, seq: seq, used: used, spentAt: spentAt,
		want: want, lease: lease, held: -1, grid: takeGrid(p)})
	return Lease{Granted: r.granted, Seq: r.seq, Holders: r.holders, Remaining: r.remaining,
		LeaseFor: r.lease, Retry: r.retry, Now: r.now, Matched: r.matched}, err
}

// KillForTest stops the store's allowance work without giving anything
// back, as if its process had died, and returns the units it held unspent.
func (s *Store) KillForTest() (held int64) { return s.lent.kill() }

// Warming: a key is lent after WarmPeriods busy periods of half a lease,
// HotThreshold decisions each.
const (
	WarmPeriods  = warmPeriods
	HotThreshold = hotThreshold
)

func init() {
	localAllowanceForTests = os.Getenv("BATCHER_TEST_LOCAL_ALLOWANCE") != ""
	if v := os.Getenv("BATCHER_TEST_COLD_LEASE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			panic("BATCHER_TEST_COLD_LEASE: " + err.Error())
		}
		coldLeaseForTests = d
	}
}

// SettledForTest reports whether no allowance of the store has a call in
// flight or is due for a background renewal, and no cold lease an early
// renewal in flight.
func (s *Store) SettledForTest() bool {
	a := s.lent
	now := a.now()
	if len(a.coldLeases.slots) > 0 || a.coldDue.pending.Load() > 0 {
		return false
	}
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		for _, r := range sh.recs {
			r.mu.Lock()
			busy := r.flight != nil || a.due(r, now) || r.nudged.Load()
			r.mu.Unlock()
			if busy {
				sh.mu.Unlock()
				return false
			}
		}
		sh.mu.Unlock()
	}
	return true
}

// HeldForTest returns the allowances held: keys and units.
func (s *Store) HeldForTest() (keys int, units int64) {
	a := s.lent
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		for _, r := range sh.recs {
			r.mu.Lock()
			keys++
			units += r.avail.Load()
			r.mu.Unlock()
		}
		sh.mu.Unlock()
	}
	return keys, units
}

// SetCountMoveHookForTest sets the hook run while an ending cold lease's
// decision count moves to its shard's, until the test ends.
func SetCountMoveHookForTest(t testing.TB, f func()) {
	testHookCountMove = f
	t.Cleanup(func() { testHookCountMove = nil })
}

// SetGiveBackHookForTest sets the hook Close runs before its give-backs.
func SetGiveBackHookForTest(f func()) { testHookGiveBack = f }

// SetGivingBackHookForTest sets the hook giveBack runs once the allowance
// is closed and before its units are sent back.
func SetGivingBackHookForTest(t testing.TB, f func()) {
	testHookGivingBack = f
	t.Cleanup(func() { testHookGivingBack = nil })
}

// SetColdAskHooksForTest sets the hooks run, for the decisions of s, when
// one that asked for a cold lease is answered (before the lease is kept)
// and when a refused one is about to wait for that lease; a nil s clears
// them.
func SetColdAskHooksForTest(s *Store, asked func(granted int64), wait func()) {
	if s == nil {
		testHookColdAsked, testHookAskWait = nil, nil
		return
	}
	testHookColdAsked = func(t *Store, granted int64) {
		if t == s {
			asked(granted)
		}
	}
	testHookAskWait = func(t *Store) {
		if t == s {
			wait()
		}
	}
}

// ColdRenewalsInFlightForTest is how many early renewals of cold leases
// are in flight or queued to begin.
func (s *Store) ColdRenewalsInFlightForTest() int {
	return len(s.lent.coldLeases.slots) + int(s.lent.coldDue.pending.Load())
}

// ColdRenewalsQueuedForTest is how many early renewals of cold leases are
// queued and not yet begun or declined.
func (s *Store) ColdRenewalsQueuedForTest() int { return int(s.lent.coldDue.pending.Load()) }

// ColdQueueRunsForTest reports whether the goroutine that begins queued
// early renewals runs.
func (s *Store) ColdQueueRunsForTest() bool {
	q := &s.lent.coldDue
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.running
}

// LockShardForTest locks the shard of key (under p) that holds its
// allowance, heat and cold lease, and returns its unlock.
func (s *Store) LockShardForTest(key string, p limit.Policy) (unlock func()) {
	sh := s.lent.shard(s.Key(key, p))
	sh.mu.Lock()
	return sh.mu.Unlock
}

// allowanceForTest returns key's allowance under p, or nil.
func (s *Store) allowanceForTest(key string, p limit.Policy) *allowance {
	sh := s.lent.shard(s.Key(key, p))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.recs[s.Key(key, p)]
}

// LockAllowanceForTest takes the lock of key's allowance under p, as a
// take or renewal of it holds it, and returns its unlock; nil when the key
// has no allowance.
func (s *Store) LockAllowanceForTest(key string, p limit.Policy) (unlock func()) {
	r := s.allowanceForTest(key, p)
	if r == nil {
		return nil
	}
	r.mu.Lock()
	return r.mu.Unlock
}

// CallInFlightForTest reports whether a call for key's allowance under p
// is in flight.
func (s *Store) CallInFlightForTest(key string, p limit.Policy) bool {
	r := s.allowanceForTest(key, p)
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.flight != nil
}

// ShardForTest returns the index of the shard of key under p.
func (s *Store) ShardForTest(key string, p limit.Policy) int {
	sh := s.lent.shard(s.Key(key, p))
	for i := range s.lent.shards {
		if &s.lent.shards[i] == sh {
			return i
		}
	}
	return -1
}

// SkipWithColdLeases skips t when the package's tests run with cold leases
// in every store (BATCHER_TEST_COLD_LEASE), for a test whose premise they
// change, saying why; the run without them covers it.
func SkipWithColdLeases(t *testing.T, why string) {
	t.Helper()
	if coldLeaseForTests != 0 {
		t.Skip("with BATCHER_TEST_COLD_LEASE: " + why)
	}
}

// SkipWithAllowancesForced skips t when the package's tests run with local
// allowances forced on in every store (BATCHER_TEST_LOCAL_ALLOWANCE), for a
// long test whose stores set their options themselves, so that the run
// would repeat the plain run's.
func SkipWithAllowancesForced(t *testing.T) {
	t.Helper()
	if localAllowanceForTests {
		t.Skip("with BATCHER_TEST_LOCAL_ALLOWANCE: its stores set their own options; the plain run covers it")
	}
}

// EndColdLockedForTest ends key's cold lease under p as a decision that
// found it short does, with the key's shard held by LockShardForTest, and
// returns the give-back to run once the shard is unlocked (nil when the key
// has no cold lease).
func (s *Store) EndColdLockedForTest(key string, p limit.Policy) (giveBack func(context.Context) error) {
	a := s.lent
	rk := s.Key(key, p)
	h := a.hash(rk)
	sh := a.shardAt(h)
	c := sh.cold.get(h, rk)
	if c == nil {
		return nil
	}
	used, left := c.end(sh)
	sh.cold.del(h, rk)
	a.coldLeases.dropped()
	return func(ctx context.Context) error { return a.giveBackCold(ctx, c, used, left) }
}

// EndLeaseForTest is a one-trip decision of cost 0 on key under p that
// ends the store's lease seq (allow.lua), reporting used units spent now.
func (s *Store) EndLeaseForTest(ctx context.Context, key string, p limit.Policy, seq, used int64) (limit.Decision, error) {
	dec, _, err := s.allowFast(ctx, limit.Request{Key: key, Policy: p}, lendAsk{seq: seq, used: used, spentAt: -1})
	return dec, err
}

// GateForTest reports, for key's allowance under p, whether its last
// answer was short and its promised retry time (local Unix ns, 0 none).
func (s *Store) GateForTest(key string, p limit.Policy) (short bool, promised int64, ok bool) {
	r := s.allowanceForTest(key, p)
	if r == nil {
		return false, 0, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.short, r.promised.Load(), true
}

// ColdPlacesForTest returns the places counted against MaxColdLeases
// (leases held and asks in flight) and the leases held.
func (s *Store) ColdPlacesForTest() (places, held int64) {
	return s.lent.coldLeases.places.Load(), s.lent.coldLeases.count.Load()
}

// AllowancesForTest returns the allowances the store counts against
// MaxAllowances and those its shards hold.
func (s *Store) AllowancesForTest() (counted, held int) {
	for i := range s.lent.shards {
		sh := &s.lent.shards[i]
		sh.mu.Lock()
		held += len(sh.recs)
		sh.mu.Unlock()
	}
	return int(s.lent.count.Load()), held
}

// SharedWordsForTest returns what the decisions on key's allowance under
// p may write, without a lock: its remainder, the dates of its latest
// spend and use, its demand, its promised retry time and its largest
// refused cost; ok false when the key has no allowance.
func (s *Store) SharedWordsForTest(key string, p limit.Policy) (w [6]int64, ok bool) {
	r := s.allowanceForTest(key, p)
	if r == nil {
		return w, false
	}
	return [6]int64{r.avail.Load(), r.lastSpend.Load(), r.lastUse.Load(), r.demand.Load(),
		r.promised.Load(), r.refused.Load()}, true
}

// TargetForTest returns the target of key's allowance under p (see
// target), as of its last take or renewal.
func (s *Store) TargetForTest(key string, p limit.Policy) int64 {
	if r := s.allowanceForTest(key, p); r != nil {
		return r.tgt.Load()
	}
	return -1
}

// SetAsideForTest takes the whole remainder of key's allowance under p, or
// of its cold lease, as a take sets it aside for its call, under the lock
// such a call holds; ok false when the key has neither.
func (s *Store) SetAsideForTest(key string, p limit.Policy) (held int64, ok bool) {
	if r := s.allowanceForTest(key, p); r != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.takeAll(), true
	}
	c, unlock := s.coldLeaseForTest(key, p)
	if c == nil {
		return 0, false
	}
	defer unlock()
	return c.avail.Swap(0), true
}

// GiveBackForTest adds n units to the remainder of key's allowance under p,
// or of its cold lease, as the answer of a take or renewal does, under the
// lock it holds.
func (s *Store) GiveBackForTest(key string, p limit.Policy, n int64) {
	if r := s.allowanceForTest(key, p); r != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.begin() // as apply gives
		r.avail.Add(n)
		r.end()
		return
	}
	if c, unlock := s.coldLeaseForTest(key, p); c != nil {
		defer unlock()
		c.avail.Add(n)
	}
}

// LastSpendForTest is the date, in Unix ns, that the latest spend from
// key's allowance under p, or from its cold lease, is reported at; -1 when
// the key has neither.
func (s *Store) LastSpendForTest(key string, p limit.Policy) int64 {
	if r := s.allowanceForTest(key, p); r != nil {
		return r.lastSpend.Load()
	}
	if c, unlock := s.coldLeaseForTest(key, p); c != nil {
		defer unlock()
		return c.lastSpend.Load()
	}
	return -1
}

// coldLeaseForTest returns key's cold lease under p with its shard locked,
// and the unlock; nil when the key has none.
func (s *Store) coldLeaseForTest(key string, p limit.Policy) (*coldLease, func()) {
	rk := s.Key(key, p)
	h := s.lent.hash(rk)
	sh := s.lent.shardAt(h)
	sh.mu.Lock()
	c := sh.cold.get(h, rk)
	if c == nil {
		sh.mu.Unlock()
		return nil, nil
	}
	return c, sh.mu.Unlock
}

// SetColdRenewedHookForTest sets the hook that sees the units each early
// renewal granted and its error, and returns the error the store goes on
// with, until the test ends.
func SetColdRenewedHookForTest(t testing.TB, f func(granted int64, err error) error) {
	testHookColdRenewed = f
	t.Cleanup(func() { testHookColdRenewed = nil })
}

// HoldColdRenewalPlacesForTest takes every free place of the early
// renewals and late answers (coldRenewals of them), as that many calls in
// flight would, and returns how many it took and a func that gives them
// back (once, however often it is called).
func (s *Store) HoldColdRenewalPlacesForTest() (n int, release func()) {
	slots := s.lent.coldLeases.slots
fill:
	for {
		select {
		case slots <- struct{}{}:
			n++
		default:
			break fill
		}
	}
	var once sync.Once
	return n, func() {
		once.Do(func() {
			for range n {
				<-slots
			}
		})
	}
}

// ColdRenewalPlaces is how many early renewals and late answers a store
// waits for at once.
const ColdRenewalPlaces = coldRenewals

// SetCallerLeftHookForTest sets the hook run when the caller of a batched
// call of s leaves, before it drops the call; queued reports whether no
// batch has taken or dropped the call yet.
func SetCallerLeftHookForTest(t testing.TB, s *Store, f func(queued func() bool)) {
	testHookCallerLeft = func(t *Store, queued func() bool) {
		if t == s {
			f(queued)
		}
	}
	t.Cleanup(func() { testHookCallerLeft = nil })
}
