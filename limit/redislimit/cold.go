package redislimit

import (
	"context"
	"errors"
	"hash/maphash"
	"maps"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/costwise/batcher/limit"
)

// Cold leases (Options.ColdLease; DESIGN-allowances.md section 10): a token
// bucket or GCRA key far from its limit is lent a few units along with its
// one-trip decision, in the same script call, for a long lease. Later
// decisions on it at this store spend them without a call. When they run
// low (a quarter left, or an eighth of the lease), the decision that finds
// them so starts a renewal beside it: a goroutine's cost-0 one-trip call
// that extends the lease (charging what was spent; the rest stays lent and
// the store goes on spending it) with more units, sized from the rate the
// lease saw, and a new end. A decision waits for it only if the rest runs
// out meanwhile. A lease spent without one (no renewal slot free, or a
// burst) sends the next decision one-trip, which ends the lease (the rest
// given back) and lends again.
// Spends are reported only then, at Close, or never: a lease that ends in
// Redis is charged in full at its end, which admits less, never more. Cold
// leases live beside the hot allowances, not in the renewal goroutine's
// sweep: a store may hold hundreds of thousands.

const (
	defaultMaxColdLeases = 1 << 18
	// coldFirst is how many decisions of its cost a key's first cold lease
	// asks for (the store knows nothing of its rate yet), and the least any
	// later one asks for.
	coldFirst = 8
	// coldFill sizes the leases after the first: the units the key's rate
	// at this store spends in this many leases (at least coldFirst), so
	// that a lease mostly ends by its time rather than by running out.
	coldFill = 1.25
	// coldCloseWorkers give the cold leases back at Close: concurrent
	// calls share script calls (batches) on a single server.
	coldCloseWorkers = 256
	// coldShare caps a cold lease at this fraction of the limit; allow.lua
	// lends only while half the limit stays free beyond it.
	coldShare = 8
	// coldRenewals bounds the early renewals in flight at once (a
	// goroutine each).
	coldRenewals = 512
	// coldPolicies bounds the policies leases share (see coldPolicy).
	coldPolicies = 1024
)

// lendAsk is the lend carried by a one-trip decision of allow.lua.
type lendAsk struct {
	want, lease   int64 // units, µs; want 0: lend nothing
	seq           int64 // the lease the call ends; 0 for none
	used, spentAt int64 // its spends since its grant, the last's time (server µs; -1 now)
	held          int64 // its remainder, which the call gives back; not sent
	// mine is closed once the lease asked for is in (want > 0); wait is
	// another decision's ask on the key, in flight when this one was sent
	// (then want is 0). Neither is sent.
	mine, wait chan struct{}
}

// lendGrant is allow.lua's answer to a lendAsk.
type lendGrant struct {
	granted, seq int64
	now          int64 // the server's µs of the call
}

// coldLease is a cold lease held by this store. A decision spends from it
// without a lock, by compare-and-swap on its remainder, as from a hot
// allowance; everything else about it changes under its shard's mutex,
// and a lease leaves its shard's table only once ended (end), its
// remainder taken, so that no spend lands after.
//
// A store may hold hundreds of thousands, far more than the caches do, so
// a decision's cost is mostly the cache lines it loads: a lease is three
// lines, 64-byte aligned (its size class is a multiple of 64), and a spend
// reads the first two only: the first holds what a spend reads and does
// not write (the Redis key and its length, which the table compares, most
// keys fitting in kb, and the policy), the second all that it writes (the
// remainder, the latest spend's time, the decisions counted) and what the
// decision reports.
type coldLease struct {
	kb      [coldKeyBytes]byte // rk when it fits
	kn      uint8              // rk's length plus one when it is in kb, else 0
	p       *limit.Policy      // shared by the leases of equal policies
	closing chan struct{}      // closed once Close has given the lease back

	avail     atomic.Int64 // units left to spend; coldEnded once ended
	deadline  atomic.Int64 // local Unix ns; nothing is spent at or after it
	lastSpend atomic.Int64 // local Unix ns, at or after every spend
	granted   atomic.Int64 // avail as of the last grant
	srvRemain atomic.Int64
	reset     atomic.Int64 // a time.Duration
	renewAt   atomic.Int64 // local Unix ns; no early renewal before it
	// spends counts the decisions answered from the lease, for
	// AllowanceStats.ColdLocal, on the line a spend writes anyway: end
	// moves the count to the shard's and leaves coldCounted, so that a
	// decision that counts after sees it and counts at the shard.
	spends atomic.Int64

	base       int64 // the units granted under the lease in all: base-avail is its spends
	seq        int64
	sent       int64 // local Unix ns the granting call was sent
	server     int64 // the server's µs of that call
	rk         string
	renewing   chan struct{} // closed once the early renewal in flight is answered
	koff, klen uint32        // the Request key: rk[koff:koff+klen] (keyAt)
}

// coldCounted is the decision count of an ended lease: far below any count.
const coldCounted = math.MinInt64 / 2

// key is the Request key of c's decisions.
func (c *coldLease) key() string { return c.rk[c.koff : c.koff+c.klen] }

// counted counts a decision answered from c, at sh once c has ended.
func (c *coldLease) counted(sh *allowShard) {
	if c.spends.Add(1) < 0 {
		sh.coldLocal.Add(1)
	}
}

// coldEnded is an ended lease's remainder: below any cost.
const coldEnded = math.MinInt64 / 2

// end takes c's remainder (its shard sh locked), so that no decision
// spends from it any more, moves its decision count to sh's, and returns
// its spends since its grant and what was left; both 0 if it had ended.
func (c *coldLease) end(sh *allowShard) (used, left int64) {
	left = c.avail.Swap(coldEnded)
	if left < 0 {
		return 0, 0
	}
	sh.moving.Add(1)
	n := c.spends.Swap(coldCounted)
	if testHookCountMove != nil {
		testHookCountMove()
	}
	sh.coldLocal.Add(n)
	sh.moving.Add(1)
	used = c.base - left
	c.base = 0
	return used, left
}

// ended reports whether c was ended (its shard locked).
func (c *coldLease) ended() bool { return c.avail.Load() < 0 }

// spend takes cost from c at ns, if c has the units and the time under p,
// and returns what is left; c's shard is locked (spendFrom). Without the
// lock, spendOnce.
func (c *coldLease) spend(p *limit.Policy, ns, grain, cost int64) (left int64, ok bool) {
	if ns >= c.deadline.Load() || *c.p != *p {
		return 0, false
	}
	return spendFrom(&c.avail, &c.lastSpend, ns, grain, cost)
}

// spendOnce is spend without the shard's lock: spendOnce on c's remainder,
// which held v before the clock read ns.
func (c *coldLease) spendOnce(p *limit.Policy, v, ns, grain, cost int64) (left int64, ok, moved bool) {
	if ns >= c.deadline.Load() || *c.p != *p {
		return 0, false, false
	}
	return spendOnce(&c.avail, &c.lastSpend, v, ns, grain, cost)
}

// coldKeyBytes is the longest Redis key a cold lease holds within itself.
const coldKeyBytes = 47

// The lease fills whole cache lines (see coldLease).
var _ [0]struct{} = [unsafe.Sizeof(coldLease{}) % 64]struct{}{}

// newColdLease returns a lease of the Redis key rk, made of the Request
// key key under p, with rk, and key within it, in the lease itself when
// they fit.
func (a *allowances) newColdLease(rk, key string, p limit.Policy) *coldLease {
	c := &coldLease{p: a.coldPolicy(p), koff: uint32(a.s.keyAt(key)), klen: uint32(len(key))}
	c.setKey(rk)
	return c
}

// coldPolicy returns the policy equal to p that the store's leases share.
// The policies a store's callers use are few; should they be many, the
// table is begun again (leases keep the policy they have).
func (a *allowances) coldPolicy(p limit.Policy) *limit.Policy {
	if m := a.coldLeases.policies.Load(); m != nil {
		if q := (*m)[p]; q != nil {
			return q
		}
	}
	a.coldLeases.pmu.Lock()
	defer a.coldLeases.pmu.Unlock()
	var m map[limit.Policy]*limit.Policy
	if old := a.coldLeases.policies.Load(); old != nil {
		if q := (*old)[p]; q != nil {
			return q
		}
		if len(*old) < coldPolicies {
			m = maps.Clone(*old)
		}
	}
	if m == nil {
		m = map[limit.Policy]*limit.Policy{}
	}
	q := &p
	m[p] = q
	a.coldLeases.policies.Store(&m)
	return q
}

// coldState is the allowances' cold leases: lease length, cap and count.
type coldState struct {
	lease time.Duration
	max   int64
	count atomic.Int64 // leases held
	// places is count plus the asks for a lease in flight: the cap (max)
	// bounds it, so that decisions that ask at once cannot together take
	// more leases than the cap (take, held, dropped, unasked).
	places atomic.Int64
	// slots holds a token per early renewal in flight; Close fills it.
	slots chan struct{}
	// policies holds the policies of leases (see coldPolicy); copied on
	// write under pmu.
	policies atomic.Pointer[map[limit.Policy]*limit.Policy]
	pmu      sync.Mutex
}

// take holds a place for a lease asked for, if fewer than max are held or
// asked for; the place is the lease's once granted (held) or given up
// (unasked).
func (cs *coldState) take() bool { return addBelow(&cs.places, cs.max) }

// held counts a lease granted for an ask that took a place.
func (cs *coldState) held() { cs.count.Add(1) }

// unasked gives up the place of an ask that brought no lease to keep.
func (cs *coldState) unasked() { cs.places.Add(-1) }

// dropped counts a lease that left its table.
func (cs *coldState) dropped() {
	cs.count.Add(-1)
	cs.places.Add(-1)
}

// spendCold spends cost on the Redis key rkb from its cold lease, into
// dec, without a lock, when the lease has the units and the time (most
// decisions on a leased key). A key holds a hot allowance or a cold lease,
// never both (a lease is kept only for a key without an allowance, and its
// decisions do not warm it), so the hot allowances, a few keys whose table
// stays in the caches, are looked up first: a hot key's decision, most of
// a skewed mix, does not probe the cold table; it gets its allowance
// (hot). Otherwise it returns the key's shard and hash, for getOrSpendCold
// when the lease cannot answer.
func (a *allowances) spendCold(rkb []byte, p *limit.Policy, cost int64, dec *limit.Decision) (sh *allowShard, h uint64, hot *allowance, ok bool) {
	h = maphash.Bytes(a.seed, rkb)
	sh = a.shardAt(h)
	if hot = sh.held(h, rkb); hot != nil {
		return sh, h, hot, false
	}
	rk := unsafe.String(&rkb[0], len(rkb)) // for the lookup only: rkb is the caller's buffer
	return sh, h, nil, a.spendColdFast(sh, h, rk, p, cost, dec)
}

// getOrSpendCold is get past spendCold (sh and h rkb's shard and hash): a
// spend from the key's cold lease under one hold of the shard's lock, or
// the key's allowance, or the lend its one-trip decision should carry.
func (a *allowances) getOrSpendCold(ctx context.Context, sh *allowShard, h uint64, rkb []byte, key string, p limit.Policy, cost int64) (r *allowance, dec limit.Decision, ok bool, ask lendAsk) {
	if r := sh.held(h, rkb); r != nil {
		return r, dec, false, ask
	}
	rk := unsafe.String(&rkb[0], len(rkb))
	sh.mu.Lock()
	c := sh.cold.get(h, rk)
	if c == nil {
		if r := a.getLocked(sh, rkb, key, p); r != nil {
			sh.mu.Unlock()
			return r, dec, false, ask
		}
	}
	dec, ok, ask = a.spendColdLocked(ctx, sh, h, rk, c, p, cost)
	return nil, dec, ok, ask
}

// spendColdFast spends cost from the cold lease of rk into dec, if it has
// the units and the time, without a lock.
func (a *allowances) spendColdFast(sh *allowShard, h uint64, rk string, p *limit.Policy, cost int64, dec *limit.Decision) bool {
	c := sh.cold.get(h, rk)
	if c == nil {
		return false
	}
	var (
		ns, left int64
		ok       bool
	)
	for {
		v := c.avail.Load() // before the clock (spendOnce)
		ns = a.nowNs()
		var moved bool
		if left, ok, moved = c.spendOnce(p, v, ns, a.grain, cost); ok || !moved {
			break
		}
	}
	if !ok {
		return false
	}
	a.spentCold(sh, c, p, left, dec)
	if a.lowCold(c, ns, left) {
		a.queueCold(c)
	}
	return true
}

// coldQueue holds the cold leases that spends without a lock found due an
// early renewal, for the goroutine that renews them (renewDueCold). The
// spend that finds its lease low queues it and returns: the shard's lock,
// the renewal's checks and the start of its goroutine, 1.5–3 µs in all on
// the benchmark's machine, are not on that decision's path
// (DESIGN-allowances.md section 10, "Renewal beside a decision").
type coldQueue struct {
	mu      sync.Mutex
	due     []coldDue
	running bool // renewDueCold runs
	// pending counts the leases queued whose renewal has not yet started
	// or been declined (renewDue), for the tests' count of renewals in
	// flight.
	pending atomic.Int64
}

// coldDue is a lease queued for an early renewal, with the renewAt it had.
type coldDue struct {
	c       *coldLease
	renewAt int64
}

const (
	// coldDueEvery is how often renewDueCold takes the queue: the most an
	// early renewal waits to be sent, far less than the quarter of the
	// lease's units and the eighth of its time that it starts with.
	coldDueEvery = time.Millisecond
	// coldDueIdle is how many empty looks renewDueCold takes before it
	// ends (100 ms): it ticks only while early renewals come.
	coldDueIdle = 100
)

// queueCold queues c for an early renewal (lowCold found it due) unless
// it is queued or renewing: the first spend to swap its renewAt for the
// largest time queues it, and the decisions after it look for no renewal.
func (a *allowances) queueCold(c *coldLease) {
	v := c.renewAt.Load()
	if v == math.MaxInt64 || !c.renewAt.CompareAndSwap(v, math.MaxInt64) {
		return
	}
	q := &a.coldDue
	q.mu.Lock()
	if a.closed.Load() {
		q.mu.Unlock()
		return // Close ends the lease
	}
	q.due = append(q.due, coldDue{c: c, renewAt: v})
	q.pending.Add(1)
	start := !q.running
	if start {
		q.running = true
		a.wg.Add(1)
	}
	q.mu.Unlock()
	if start {
		go a.renewDueCold()
	}
}

// renewDueCold starts the early renewals of the queued leases, every
// coldDueEvery, until the queue has stayed empty coldDueIdle times or the
// store closes.
func (a *allowances) renewDueCold() {
	defer a.wg.Done()
	t := time.NewTimer(coldDueEvery)
	defer t.Stop()
	q := &a.coldDue
	var due []coldDue
	for idle := 0; ; {
		select {
		case <-a.stop:
			// Close ends the leases queued.
			q.mu.Lock()
			q.pending.Add(-int64(len(q.due)))
			q.due = nil
			q.mu.Unlock()
			return
		case <-t.C:
		}
		q.mu.Lock()
		due, q.due = q.due, due[:0]
		if len(due) > 0 {
			idle = 0
		} else if idle++; idle >= coldDueIdle {
			q.running = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		for _, d := range due {
			a.renewDue(d)
		}
		clear(due)
		t.Reset(coldDueEvery)
	}
}

// renewDue starts d's early renewal if its lease is still due one: it gets
// its renewAt back, which renewColdEarly reads, and keeps it if no renewal
// starts, so that a later spend queues it again.
func (a *allowances) renewDue(d coldDue) {
	defer a.coldDue.pending.Add(-1) // after renewColdEarly took its place
	c := d.c
	sh := a.shard(c.rk)
	sh.mu.Lock()
	if c.ended() || c.closing != nil || c.renewing != nil || c.renewAt.Load() != math.MaxInt64 {
		sh.mu.Unlock()
		return
	}
	c.renewAt.Store(d.renewAt)
	ask, start := a.renewColdEarly(c, a.now())
	sh.mu.Unlock()
	if start {
		go a.renewCold(c, ask)
	}
}

// spendAfterAsk answers a decision on rk that Redis refused while another
// decision's ask for rk's cold lease (wait) was in flight: the units on
// their way here were counted there already, so the decision waits for
// them and spends from the lease if it can (ok true).
func (a *allowances) spendAfterAsk(ctx context.Context, rk string, p limit.Policy, cost int64, wait chan struct{}) (limit.Decision, bool) {
	select {
	case <-wait:
	case <-ctx.Done():
		return limit.Decision{}, false
	}
	h := a.hash(rk)
	var dec limit.Decision
	ok := a.spendColdFast(a.shardAt(h), h, rk, &p, cost, &dec)
	return dec, ok
}

// spentCold counts a decision spent from c, which left left units, and
// writes it into dec. The units the lease still holds are this store's to spend:
// Remaining counts them, and ResetAfter (the state's, which counts every
// unit lent as spent) does not.
func (a *allowances) spentCold(sh *allowShard, c *coldLease, p *limit.Policy, left int64, dec *limit.Decision) {
	c.counted(sh)
	*dec = limit.Decision{Allowed: true, Limit: p.Limit, Remaining: left + c.srvRemain.Load(),
		ResetAfter: unheld(p, time.Duration(c.reset.Load()), left), Policy: p.Name}
}

// unheld is reset, a state's ResetAfter that counts units held by this
// store as spent, less their refill under p (a token bucket or GCRA).
func unheld(p *limit.Policy, reset time.Duration, units int64) time.Duration {
	if units <= 0 || p.Rate.Count <= 0 {
		return reset
	}
	per := float64(p.Rate.Period) / float64(p.Rate.Count)
	if f := float64(units) * per; f < float64(reset) {
		return reset - time.Duration(f)
	}
	return 0
}

// lowCold reports whether c, spent from at ns with left units left, may be
// due an early renewal (renewColdEarly decides, under the lock).
func (a *allowances) lowCold(c *coldLease, ns, left int64) bool {
	return ns >= c.renewAt.Load() &&
		(left*4 < c.granted.Load() || time.Duration(c.deadline.Load()-ns) < a.coldLeases.lease/8)
}

// spendColdLocked decides cost from c, the cold lease of rk (nil for none),
// if it has the units (ok true). Otherwise it returns the lend the one-trip
// decision should carry: the end of the lease it had, if any, and a new one.
// It is called with sh.mu held, and lets it go.
func (a *allowances) spendColdLocked(ctx context.Context, sh *allowShard, h uint64, rk string, c *coldLease, p limit.Policy, cost int64) (dec limit.Decision, ok bool, ask lendAsk) {
	unlocked := false
	defer func() {
		if !unlocked {
			sh.mu.Unlock()
		}
	}()
	now := a.now()
	ns := now.UnixNano()
	if c != nil && c.renewing == nil && c.closing == nil && c.renewAt.Load() == math.MaxInt64 &&
		c.avail.Load() >= 0 && c.avail.Load() < cost && ns < c.deadline.Load() {
		// Queued for an early renewal (queueCold) that has not begun, and
		// out of units: the renewal begins here, and the decision waits
		// for it below, as it would have had the renewal begun when queued
		// (its goroutine starts under the lock: this decision lets the
		// lock go at once to wait).
		c.renewAt.Store(0)
		if ask, start := a.renewColdEarly(c, now); start {
			go a.renewCold(c, ask)
		}
	}
	for c != nil && c.renewing != nil && (c.avail.Load() < cost || ns >= c.deadline.Load()) {
		// Its renewal brings units and time (or ends the lease) in a round
		// trip; ending the lease here as well would race with it.
		ch := c.renewing
		sh.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		sh.mu.Lock()
		if ctx.Err() != nil {
			return limit.Decision{}, false, lendAsk{} // the one-trip path answers with ctx's error
		}
		now = a.now()
		ns = now.UnixNano()
		c = sh.cold.get(h, rk)
	}
	if c != nil && c.closing != nil {
		// Close is giving the units back: the one-trip path answers once
		// they are, as it would have with them never lent.
		ch := c.closing
		sh.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		sh.mu.Lock()
		return limit.Decision{}, false, lendAsk{}
	}
	if c != nil {
		if left, ok := c.spend(&p, ns, a.grain, cost); ok {
			a.spentCold(sh, c, &p, left, &dec)
			if ask, start := a.renewColdEarly(c, now); start {
				unlocked = true
				sh.mu.Unlock()
				go a.renewCold(c, ask)
			}
			return dec, true, lendAsk{}
		}
	}
	if a.closed.Load() || p.Validate() != nil {
		// Closing, or a policy the one-trip path refuses with an error
		// (which ends no lease).
		return limit.Decision{}, false, lendAsk{}
	}
	want := a.coldWant(c, p, now, cost)
	if cost == 0 {
		want = 0 // a query lends nothing (and so writes no state of its own)
	}
	if c != nil {
		used, left := c.end(sh)
		sh.cold.del(h, c.rk)
		a.coldLeases.dropped()
		if ns < c.deadline.Load() {
			ask.seq, ask.used, ask.held = c.seq, used, left
			ask.spentAt = a.coldSpentAt(c, used)
		} else {
			a.stats.expired.Add(left) // charged at the lease's end
		}
	}
	if want > 0 && (a.coldLeases.places.Load() >= a.coldLeases.max || now.Sub(sh.sweptAt) >= a.coldLeases.lease) {
		// Leases of keys no longer decided are forgotten once a lease
		// (their deadline passed), so that memory follows the keys decided
		// within a lease, not every key ever lent.
		a.sweepCold(sh, now)
	}
	if want > 0 {
		if ch := sh.asks[rk]; ch != nil {
			// Another decision here is asking for the key's lease: this
			// one asks for none and, should Redis refuse it (the units on
			// their way here counted there), spends from that lease.
			want, ask.wait = 0, ch
		} else if !a.coldLeases.take() {
			want = 0 // the store holds, or has asked for, as many as it may
		} else {
			if sh.asks == nil {
				sh.asks = make(map[string]chan struct{})
			}
			ask.mine = make(chan struct{})
			sh.asks[strings.Clone(rk)] = ask.mine
		}
	}
	ask.want, ask.lease = want, int64(a.coldLeases.lease/time.Microsecond)
	return limit.Decision{}, false, ask
}

// coldWant is how many units a cold lease of p should ask for after c
// (nil for none): at least coldFirst decisions of cost, what c's rate
// spends in coldFill leases, at most the limit's coldShare.
func (a *allowances) coldWant(c *coldLease, p limit.Policy, now time.Time, cost int64) int64 {
	want := coldFirst * max(cost, 1)
	if c != nil {
		el := max(time.Duration(now.UnixNano()-c.sent), time.Millisecond)
		rate := float64(c.granted.Load()-max(c.avail.Load(), 0)) / el.Seconds()
		want = max(int64(math.Ceil(rate*a.coldLeases.lease.Seconds()*coldFill)), want)
	}
	return max(min(want, p.Limit/coldShare), 0)
}

// renewColdEarly marks c's renewal in flight when its units or its time are
// low (sh locked, a decision just spent from c at now: a spend without the
// lock may have been c's last before another decision ended it, and an
// ended lease has nothing to report or renew), and returns the ask
// for the caller to send with go renewCold once sh is unlocked (a goroutine
// started under the lock would take the place, on this processor, of the
// decision the unlock wakes). The call extends the lease, so c goes on
// spending what it holds; the spends reported are those made before the
// call. No slot free, or a lease that may not be renewed, leaves c to run
// out: its next decision goes one-trip.
func (a *allowances) renewColdEarly(c *coldLease, now time.Time) (ask lendAsk, start bool) {
	if c.ended() || c.renewing != nil || c.closing != nil || !a.lowCold(c, now.UnixNano(), c.avail.Load()) || a.closed.Load() {
		return ask, false
	}
	want := a.coldWant(c, *c.p, now, 1)
	if want <= 0 {
		return ask, false
	}
	select {
	case a.coldLeases.slots <- struct{}{}:
	default:
		return ask, false
	}
	used := c.base - c.avail.Load()
	ask = lendAsk{seq: -c.seq, used: used, spentAt: a.coldSpentAt(c, used), want: want,
		lease: int64(a.coldLeases.lease / time.Microsecond)}
	c.renewing = make(chan struct{})
	c.renewAt.Store(math.MaxInt64) // no decision looks for a renewal meanwhile
	return ask, true
}

// renewCold sends c's early renewal (ask) and takes in its answer: the
// lease goes on with more units and a new end, or as it was, or, when the
// state no longer held it (Redis restarted empty, say), c leaves the store
// with what it held.
func (a *allowances) renewCold(c *coldLease, ask lendAsk) {
	defer func() { <-a.coldLeases.slots }()
	sent := a.now()
	ctx, cancel := a.bounded(context.Background(), a.lateFor())
	dec, g, err := a.s.allowFast(ctx, limit.Request{Key: c.key(), Policy: *c.p}, ask)
	cancel()
	if testHookColdRenewed != nil {
		err = testHookColdRenewed(g.granted, err)
	}
	a.stats.coldRenewals.Add(1)
	h := a.hash(c.rk)
	sh := a.shardAt(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ch := c.renewing
	c.renewing = nil
	defer close(ch)
	switch {
	case c.ended():
		// Swept meanwhile, its deadline passed: what the call lent is
		// lost until the new end.
		a.stats.lent.Add(g.granted)
		a.stats.expired.Add(g.granted)
	case err != nil:
		// The spends are reported again by a later call, which charges
		// only those this one did not, if it was applied; the units it
		// may have granted stay in the lease, given back with it.
		c.renewAt.Store(sent.Add(a.coldLeases.lease / 16).UnixNano())
	case g.seq == 0:
		_, left := c.end(sh)
		a.stats.expired.Add(left)
		sh.cold.del(h, c.rk)
		a.coldLeases.dropped()
	case g.granted == 0:
		// Kept as it was (the key is nearer its limit): spend it out.
		c.renewAt.Store(sent.Add(a.coldLeases.lease / 16).UnixNano())
	default:
		a.stats.lent.Add(g.granted)
		c.base += g.granted
		c.seq = g.seq
		// The answer's state first: a decision between the two stores
		// counts the new units once at most (Remaining low for a moment).
		c.srvRemain.Store(dec.Remaining)
		c.reset.Store(int64(dec.ResetAfter))
		c.granted.Store(c.avail.Add(g.granted))
		c.deadline.Store(a.coldDeadline(sent))
		c.sent, c.server = sent.UnixNano(), g.now
		c.renewAt.Store(0)
	}
}

// setKey makes rk the Redis key of c, within c when it fits.
func (c *coldLease) setKey(rk string) {
	c.rk = rk
	if len(rk) > 0 && len(rk) <= len(c.kb) {
		c.kn = uint8(copy(c.kb[:], rk) + 1)
		c.rk = unsafe.String(&c.kb[0], len(rk))
	}
}

// is reports whether c is the lease of the Redis key rk, reading the
// lease's first cache line alone when the key fits in it.
func (c *coldLease) is(rk string) bool {
	if c.kn > 0 {
		return int(c.kn)-1 == len(rk) && string(c.kb[:c.kn-1]) == rk
	}
	return c.rk == rk
}

// coldDeadline is the local deadline of a lease granted by a call sent at
// sent: its end less the margin of DESIGN-allowances.md 2.6.
func (a *allowances) coldDeadline(sent time.Time) int64 {
	return sent.Add(a.coldLeases.lease - max(time.Millisecond, a.coldLeases.lease/1000)).UnixNano()
}

// coldSpentAt returns a server time at or after the spends of c counted in
// used (-1 when used is 0): it is called after used was read.
func (a *allowances) coldSpentAt(c *coldLease, used int64) int64 {
	if used == 0 {
		return -1
	}
	last := c.lastSpend.Load()
	if a.s.clock != nil {
		return time.Unix(0, last).UnixMicro()
	}
	// The server answered after the call was sent, so this is at or after
	// the spend's server time.
	return c.server + ceilMicros(time.Duration(last-c.sent)) + 1
}

// sweepCold forgets the leases of sh whose local deadline has passed (sh
// locked).
func (a *allowances) sweepCold(sh *allowShard, now time.Time) {
	if now.Sub(sh.sweptAt) < a.coldLeases.lease/16 {
		return // swept a moment ago: a full store stays full until leases end
	}
	sh.sweptAt = now
	ns := now.UnixNano()
	sh.cold.each(func(c *coldLease) bool {
		if ns < c.deadline.Load() {
			return false
		}
		_, left := c.end(sh)
		a.stats.expired.Add(left)
		a.coldLeases.dropped()
		return true
	})
}

// endedCold counts the answer to a call that carried ask: the lease it
// ended gave its remainder back, unless the call failed (then Redis
// charges it in full at its end).
func (a *allowances) endedCold(ask lendAsk, err error) {
	if ask.seq == 0 {
		return
	}
	if err != nil {
		a.stats.expired.Add(ask.held)
	} else {
		a.stats.returned.Add(ask.held)
	}
}

// askAnswered takes in the answer (v, or err) to a one-trip decision of r
// on the Redis key rk that carried ask, sent at sent, and whose caller left
// once it was sent (Store.sendLate): the lease the call ended is counted,
// and the lease it lent is kept or given back, as when the caller waits.
func (a *allowances) askAnswered(r limit.Request, rk string, ask lendAsk, sent time.Time, v [8]int64, err error) {
	a.endedCold(ask, err)
	if ask.want <= 0 {
		return
	}
	var dec limit.Decision
	var g lendGrant
	if err == nil {
		dec, g = fastAnswer(r, v)
	}
	if testHookColdAsked != nil {
		testHookColdAsked(a.s, g.granted)
	}
	a.installCold(context.Background(), rk, r, dec, g, sent, ask.mine)
}

// reserveLate takes a place for a call answered after its caller left
// (Store.sendLate) among the early renewals' places, which Close waits
// for; false when none is free or the store has closed.
func (a *allowances) reserveLate() bool {
	if a.coldLeases.slots == nil || a.closed.Load() {
		return false
	}
	select {
	case a.coldLeases.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// lateFor is how long a call's answer is waited for after its caller
// left: as long as an early renewal's.
func (a *allowances) lateFor() time.Duration { return max(a.period, time.Second) }

// awaitLate waits for done, the answer to a call whose caller left, for
// lateFor at most, whatever the client's timeouts (a client without a read
// timeout on a frozen server would wait for ever, and Close with it), and
// no longer than Close's context; it reports whether the answer came.
func (a *allowances) awaitLate(done <-chan struct{}) bool {
	t := time.NewTimer(a.lateFor())
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	case <-a.abandoned.Done():
		return false
	}
}

// errNoLateAnswer is the failure of a call whose answer awaitLate waited
// for in vain: it may have been applied, so what it ended or lent is left
// to end in Redis.
var errNoLateAnswer = errors.New("redislimit: no answer within the bound after the caller left")

// lateDone gives back the place of reserveLate.
func (a *allowances) lateDone() { <-a.coldLeases.slots }

// installCold keeps the lease a one-trip decision of r, sent at sent, was
// granted (g zero when the call failed), and then closes mine, its ask. A
// grant the store cannot keep (it closed, or the key has an allowance
// meanwhile) is given back.
func (a *allowances) installCold(ctx context.Context, rk string, r limit.Request, dec limit.Decision, g lendGrant, sent time.Time, mine chan struct{}) {
	if g.granted <= 0 {
		a.coldLeases.unasked()
		h := a.hash(rk)
		sh := a.shardAt(h)
		sh.mu.Lock()
		sh.askDone(rk, mine)
		sh.mu.Unlock()
		return
	}
	a.stats.lent.Add(g.granted)
	c := a.newColdLease(rk, r.Key, r.Policy)
	c.seq, c.base, c.sent, c.server = g.seq, g.granted, sent.UnixNano(), g.now
	c.avail.Store(g.granted)
	c.granted.Store(g.granted)
	c.deadline.Store(a.coldDeadline(sent))
	c.srvRemain.Store(dec.Remaining)
	c.reset.Store(int64(dec.ResetAfter))
	h := a.hash(rk)
	sh := a.shardAt(h)
	sh.mu.Lock()
	if !a.closed.Load() && sh.cold.get(h, rk) == nil && sh.recs[rk] == nil {
		delete(sh.heat, rk) // decided here from now on, not one-trip
		sh.cold.put(h, c)
		a.coldLeases.held()
		sh.askDone(rk, mine)
		sh.mu.Unlock()
		return
	}
	a.coldLeases.unasked()
	sh.askDone(rk, mine)
	sh.mu.Unlock()
	_ = a.giveBackCold(context.WithoutCancel(ctx), c, 0, g.granted) // on failure the lease ends in Redis on its own
}

// askDone ends the ask mine for rk's cold lease (sh locked): the
// decisions that wait for it look for the lease.
func (sh *allowShard) askDone(rk string, mine chan struct{}) {
	if sh.asks[rk] == mine {
		delete(sh.asks, rk)
	}
	close(mine)
}

// giveBackCold ends c in Redis, reporting used units spent (the rest
// given back); c is out of the store's reach or closing. It is a one-trip
// decision of cost 0 that ends the lease, so that on a single server
// concurrent give-backs share script calls.
func (a *allowances) giveBackCold(ctx context.Context, c *coldLease, used, held int64) error {
	if a.now().UnixNano() >= c.deadline.Load() {
		a.stats.expired.Add(held)
		return nil
	}
	spentAt := a.coldSpentAt(c, used)
	ctx, cancel := context.WithTimeout(ctx, max(a.period, time.Second))
	defer cancel()
	ask := lendAsk{seq: c.seq, used: used, spentAt: spentAt, held: held}
	_, _, err := a.s.allowFast(ctx, limit.Request{Key: c.key(), Policy: *c.p}, ask)
	a.endedCold(ask, err)
	return err
}

// dropCold takes rk's cold lease out of the store and ends it in Redis.
func (a *allowances) dropCold(ctx context.Context, rk string) error {
	h := a.hash(rk)
	sh := a.shardAt(h)
	sh.mu.Lock()
	c := sh.cold.get(h, rk)
	for c != nil && c.renewing != nil {
		// Ended after its renewal, which may change its seq.
		ch := c.renewing
		sh.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		sh.mu.Lock()
		c = sh.cold.get(h, rk)
	}
	if c == nil {
		sh.mu.Unlock()
		return nil
	}
	used, left := c.end(sh)
	sh.cold.del(h, rk)
	a.coldLeases.dropped()
	sh.mu.Unlock()
	return a.giveBackCold(ctx, c, used, left)
}

// closeCold ends every cold lease (the store is closed: none is added).
// A decision on a key meanwhile waits for its lease's give-back, then
// takes the one-trip path, which finds the units returned.
func (a *allowances) closeCold(ctx context.Context) error {
	a.waitColdRenewals()
	var leases []*coldLease
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		sh.cold.each(func(c *coldLease) bool {
			leases = append(leases, c)
			return false
		})
		sh.mu.Unlock()
	}
	return parallel(len(leases), coldCloseWorkers, func(i int) error { return a.closeOne(ctx, leases[i]) })
}

// waitColdRenewals waits for the early renewals in flight and lets no
// other start (the store is closed).
func (a *allowances) waitColdRenewals() {
	if a.coldLeases.slots == nil {
		return
	}
	for range cap(a.coldLeases.slots) {
		a.coldLeases.slots <- struct{}{}
	}
}

// closeOne gives c back for Close; spends stop while it does.
func (a *allowances) closeOne(ctx context.Context, c *coldLease) error {
	h := a.hash(c.rk)
	sh := a.shardAt(h)
	sh.mu.Lock()
	if sh.cold.get(h, c.rk) != c {
		sh.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	c.closing = ch
	c.renewAt.Store(math.MaxInt64)
	used, held := c.end(sh)
	sh.mu.Unlock()
	err := a.giveBackCold(ctx, c, used, held)
	sh.mu.Lock()
	if sh.cold.get(h, c.rk) == c {
		sh.cold.del(h, c.rk)
		a.coldLeases.dropped()
	}
	sh.mu.Unlock()
	close(ch)
	return err
}
