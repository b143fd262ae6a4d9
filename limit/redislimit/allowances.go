package redislimit

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/costwise/batcher/limit"
)

// Local allowances (Options.LocalAllowance; DESIGN-allowances.md): a token
// bucket, GCRA, fixed or sliding window key decided often at this store
// spends from units taken out of its Redis state in one script call, which
// records them as lent.
// A key is lent only once it has been busy (hotThreshold decisions in a
// period of half a lease) for warmPeriods periods in a row; until then,
// and for every other key, decisions take the one-trip path unchanged.

const (
	defaultAllowanceLease = 500 * time.Millisecond
	hotThreshold          = 4     // decisions in one period that make it busy
	warmPeriods           = 4     // busy periods in a row before a key is lent
	maxHeat               = 65536 // keys whose heat is tracked at once
	defaultMaxAllowances  = 4096
	shardBits             = 8
	shardCount            = 1 << shardBits
	nudgeQueue            = 1024
	closeWorkers          = 8
)

// AllowanceStats counts a store's local allowances and what its decisions
// cost in Redis calls, since New.
type AllowanceStats struct {
	// Lent is the units granted to this store.
	Lent int64
	// Returned is the units this store gave back unspent: cooled keys,
	// Close, AllowAll/CountAll/Settle/Reset on a held key, and decisions
	// that the remainder and the state together could not meet.
	Returned int64
	// Expired is the units this store held when their lease ended before
	// a renewal reached Redis: the shared state counts them spent at the
	// lease end. This is the capacity lost to allowances.
	Expired int64
	// Renewals is the allowance script's takes and renewals, Background
	// those sent by the store's renewal goroutine rather than a decision.
	Renewals, Background int64
	// Local is the decisions answered from an allowance, allowed or
	// refused; Remote those that took the one-trip path.
	Local, Remote int64
	// ColdLocal is the decisions of Local answered from cold leases
	// (Options.ColdLease); ColdLeases the cold leases held now;
	// ColdRenewals the cold leases renewed early, beside a decision
	// rather than by one.
	ColdLocal, ColdLeases, ColdRenewals int64
	// Commands is the script calls this store sent to Redis: decisions,
	// batches of decisions, allowance takes, renewals and returns.
	Commands int64
}

// counters are the atomic counts behind AllowanceStats.
type counters struct {
	lent, returned, expired, renewals, background, remote, commands, coldRenewals atomic.Int64
}

// AllowanceStats returns the store's counts (see AllowanceStats). Without
// LocalAllowance only Remote and Commands move. With cold leases it reads
// each lease held (their decisions are counted on the lease, see
// coldLease.spends).
func (s *Store) AllowanceStats() AllowanceStats {
	c := &s.stats
	st := AllowanceStats{Lent: c.lent.Load(), Returned: c.returned.Load(), Expired: c.expired.Load(),
		Renewals: c.renewals.Load(), Background: c.background.Load(),
		Remote: c.remote.Load(), Commands: c.commands.Load(),
		ColdLeases: s.coldLeases(), ColdRenewals: c.coldRenewals.Load()}
	if s.lent != nil {
		st.Local = s.lent.local.load()
		for i := range s.lent.shards {
			cold := s.lent.shards[i].coldCounted()
			st.Local += cold
			st.ColdLocal += cold
		}
	}
	return st
}

// coldCounted is the decisions sh's cold leases answered: those of the
// leases it holds and of those that ended. It reads the leases without the
// shard's lock, which a stats reader should not wait for nor hold, and
// reads again when a lease's count moved to the shard's meanwhile (moving)
// or a decision was counted at the shard (the shard's count only grows),
// taking the lock only if that keeps happening.
func (sh *allowShard) coldCounted() int64 {
	sum := func() int64 {
		var n int64
		s := sh.cold.slots()
		for i := range s {
			if c := s[i].c.Load(); c != nil {
				n += max(c.spends.Load(), 0)
			}
		}
		return n
	}
	for range 64 {
		m := sh.moving.Load()
		before := sh.coldLocal.Load()
		n := sum()
		if m&1 == 0 && sh.coldLocal.Load() == before && sh.moving.Load() == m {
			return before + n
		}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.coldLocal.Load() + sum()
}

// coldLeases is how many cold leases s holds now.
func (s *Store) coldLeases() int64 {
	if s.lent == nil {
		return 0
	}
	return s.lent.coldLeases.count.Load()
}

// allowances are a store's local allowances.
type allowances struct {
	shards [shardCount]allowShard // first: see allowShard
	// local is the decisions the allowances answered (AllowanceStats.Local),
	// counted on the calling goroutine's stripe, so that decisions on two
	// processors write no common line for it; its stripes start on a line
	// as the shards end on one.
	local  stripes
	s      *Store
	stats  *counters
	holder string
	lease  time.Duration
	period time.Duration // half a lease: the renewal period
	max    int64

	anchor     time.Time    // see now
	anchorNs   int64        // anchor's Unix ns
	grain      int64        // ns: the spends' and uses' dates are kept to it (spendFrom)
	seed       maphash.Seed // picks the shards
	count      atomic.Int64 // records
	coldLeases coldState    // lease 0: none
	closed     atomic.Bool
	nudge      chan *allowance // records whose remainder ran low
	stop       chan struct{}
	// abandon ends the background calls and waits (renewals, answers
	// awaited for callers that left: see bounded) once Close's context
	// has ended, so that Close returns by it.
	abandoned context.Context
	abandon   context.CancelFunc

	// The renewal goroutine runs while the store has allowances.
	runMu   sync.Mutex
	running bool
	wg      sync.WaitGroup

	coldDue coldQueue // cold leases a spend found due an early renewal
}

// allowShard is a part of the allowances, picked by a hash of the key. Its
// fields fall in three cache lines of their own: what the shard's lock
// guards (written by every decision that takes it), the hot map and the
// cold-lease table (read by every decision, written seldom) and the counts
// of the decisions that take no lock, so that decisions on one core do not
// evict from the other's cache what they only read.
type allowShard struct {
	mu   sync.Mutex
	recs map[string]*allowance // by Redis key
	heat map[string]heat       // keys without a record
	// sweptAt is when cold was last rid of leases past their deadline.
	sweptAt time.Time
	// asks holds, by Redis key, the cold lease asked for by a one-trip
	// decision in flight: closed once it is in (or not granted).
	asks map[string]chan struct{}
	_    [64 - (8+8+8+24+8)%64]byte

	// hot is a copy of recs that decisions read without mu: replaced
	// (under mu) whenever recs changes, never written after, so that a
	// hot key's decisions do not queue on the shard's lock behind one
	// another and every other key of the shard.
	hot atomic.Pointer[hotTable]
	// hotKeys has bit hotBit(h) set for the hash h of every key in hot,
	// and is stored after it: a decision on a key whose bit is clear
	// skips the table, which saves a cold key two dependent loads.
	hotKeys atomic.Uint64
	cold    coldTable // cold leases (Options.ColdLease), by Redis key
	_       [64 - (8+8+40)%64]byte

	// coldLocal is the decisions of the cold leases that ended
	// (coldLease.spends has the others').
	coldLocal atomic.Int64
	// moving is odd while a lease's count moves to coldLocal (end, under
	// mu), so that coldCounted sees the move whole or not at all.
	moving atomic.Uint64
	_      [48]byte
}

// The shards start on a cache line (they open allowances, which is larger
// than a page) and each fills whole lines.
var (
	_ [0]struct{} = [unsafe.Sizeof(allowShard{}) % 64]struct{}{}
	_ [0]struct{} = [unsafe.Offsetof(allowShard{}.hot) % 64]struct{}{}
	_ [0]struct{} = [unsafe.Offsetof(allowShard{}.coldLocal) % 64]struct{}{}
	_ [0]struct{} = [unsafe.Offsetof(allowances{}.local) % 64]struct{}{}
)

// heat is how busy a key without an allowance has been, by period.
type heat struct {
	idx                 int64 // the period, counted from the Unix epoch
	cost, prevCost      int64 // cost decided in it and in the one before
	retryAt, retryCost  int64 // the latest one-trip denial's retry time (Unix ns) and its cost
	count, prev, streak int32 // decisions in it and in the one before; busy periods before it
}

// allowance is one key's allowance at this store.
//
// A decision spends from it, or is refused by the refusal it last learned
// from Redis, without mu (decideFast): avail is taken by compare-and-swap,
// and the refusal state is a snapshot (gate) published by each change of
// it. Everything else is mu's: takes, renewals, give-backs and the
// decisions the fast path cannot answer. ver is odd while a holder of mu
// changes the refusal state (begin, end), so that a fast refusal that
// overlapped the change is made again under mu.
type allowance struct {
	// Written by every decision; kept together, the line they share is
	// the one a decision moves between processors.
	avail     atomic.Int64 // units left to spend
	lastSpend atomic.Int64 // Unix ns, at or after the latest spend
	lastUse   atomic.Int64 // Unix ns at or after the latest decision, by a grain at most (decideFast)
	demand    atomic.Int64 // cost decided since rateAt, allowed or refused

	deadline  atomic.Int64 // local Unix ns; nothing is spent at or after it
	ver       atomic.Uint64
	gate      atomic.Pointer[gate]
	tgt       atomic.Int64 // target(r), for the nudge
	promised  atomic.Int64 // Unix ns: the latest time a refused decision on the key was told to come back
	refused   atomic.Int64 // the largest cost refused since the remainder last met it
	srvRemain atomic.Int64 // what the last call said is left in Redis
	rateAtNs  atomic.Int64 // rateAt, Unix ns
	reset     atomic.Int64 // its reset, ns
	closed    atomic.Bool
	nudged    atomic.Bool

	mu      sync.Mutex
	sh      *allowShard
	h       uint64 // rk's hash
	rk, key string
	p       limit.Policy
	seq     int64 // the lease; 0 for none
	// base is avail plus the units spent since the last report: what
	// this store holds under the lease by its own count. A spend moves
	// units from avail to the spent part, so the unreported spends are
	// base - avail at any instant.
	base      int64
	sent      time.Time     // local time the last answered call was sent
	server    int64         // the server's time of that call, µs
	rateAt    time.Time     // start of the current rate sample; rateAtNs has it for decideFast
	rate      float64       // cost per second decided here, smoothed
	holders   int64         // the most holders the answers of the last lease counted
	holdersAt time.Time     // local time of the answer that set holders
	notBefore time.Time     // the last refusal time Redis answered: the RetryAfter of local refusals; no renewal before it
	nbUnits   int64         // the units Redis will have for this store at notBefore
	askAt     time.Time     // local refusals of costs up to nbUnits until then: notBefore, or a period after the answer if sooner
	flightAt  time.Time     // local time the call in flight was sent
	nextTake  time.Time     // the renewal goroutine asks for more only from then
	flight    chan struct{} // closed when the call in flight is answered
	short     bool          // the last answer granted less than asked for
}

// gate is what a decision needs of an allowance's refusal state when it
// finds too little to spend, as of the last time its lock was let go.
type gate struct {
	notBefore, askAt int64 // Unix ns
	nbUnits          int64
	flightAt         int64 // Unix ns the call in flight was sent; 0: none
	short            bool
}

// begin opens a change of r's refusal state (r held locked): fast
// refusals meanwhile are made again under the lock.
func (r *allowance) begin() { r.ver.Add(1) }

// end publishes r's refusal state (r held locked) and closes the change.
func (r *allowance) end() {
	g := gate{notBefore: unixNano(r.notBefore), askAt: unixNano(r.askAt), nbUnits: r.nbUnits,
		short: r.short}
	if r.flight != nil {
		g.flightAt = unixNano(r.flightAt)
	}
	if cur := r.gate.Load(); cur == nil || *cur != g {
		r.gate.Store(&g)
	}
	r.ver.Add(1)
}

// inFlight reports whether a call of r is in flight, as last published.
func (r *allowance) inFlight() bool {
	g := r.gate.Load()
	return g != nil && g.flightAt != 0
}

// unixNano is t in Unix ns, 0 for the zero time.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// storeMax sets x to v if v is larger.
func storeMax(x *atomic.Int64, v int64) {
	for {
		o := x.Load()
		if v <= o || x.CompareAndSwap(o, v) {
			return
		}
	}
}

// spend takes cost from r's remainder at ns, if it holds that much, and
// returns what is left; r is locked (spendFrom).
func (r *allowance) spend(ns, grain, cost int64) (left int64, ok bool) {
	return spendFrom(&r.avail, &r.lastSpend, ns, grain, cost)
}

// spendSince takes cost from r's remainder at ns, if it holds that much
// and no grant ran since r.ver read g, before the clock read ns; granted
// reports that one ran, or runs. A grant runs between two changes of ver
// (apply), so ver read before the clock and again after the remainder says
// that the units the spend takes were held at its date (spendOnce). A
// compare-and-swap that fails meanwhile lost to other spends only, and is
// tried again at the same date. The remainder is read right before the
// swap, so that two processors spending from one key rarely fail theirs:
// read before the clock instead, a failure and a second clock read were
// the rule (BenchmarkHotSpend/allowed/1, 81 ns a decision became 160).
func (r *allowance) spendSince(g uint64, ns, grain, cost int64) (left int64, ok, granted bool) {
	if g&1 != 0 {
		return 0, false, true
	}
	for {
		v := r.avail.Load()
		if r.ver.Load() != g {
			return 0, false, true
		}
		left, ok, moved := spendOnce(&r.avail, &r.lastSpend, v, ns, grain, cost)
		if !moved {
			return left, ok, false
		}
	}
}

// spendGrain is how far ahead of a spend its date may be put, so that the
// spends within it write no date: a report is charged as of its date, and
// the scripts charge one dated ahead of their time as of that time
// (allow.lua, allowance.lua), so that the date errs only late, which
// charges more, never less, and by a grain at most.
const spendGrain = time.Millisecond

// spendFrom takes cost from the remainder avail at ns, if it holds that
// much, with lastSpend made at least ns first, and returns what is left.
// A lastSpend below ns is made ns + grain: the spends up to that time
// leave it as it is. The caller holds the lock under which units are
// given, so that the remainder only falls after ns, and what it holds at
// the spend was held at ns. A decision without the lock uses spendOnce.
func spendFrom(avail, lastSpend *atomic.Int64, ns, grain, cost int64) (left int64, ok bool) {
	for {
		left, ok, moved := spendOnce(avail, lastSpend, avail.Load(), ns, grain, cost)
		if !moved {
			return left, ok
		}
	}
}

// spendOnce takes cost from the remainder avail if it still holds v, with
// lastSpend made at least ns first (see spendFrom); moved reports that it
// no longer held v. A decision is dated at its clock read ns, so the units
// it spends must have been held then, and a take's or renewal's answer can
// land between the read and the spend. The caller makes sure that what v
// holds was held at ns: v read under a lock that every grant takes
// (spendFrom), or before the clock (a cold lease's spend without the lock,
// which reads both again when v moved), or between two equal reads of a
// counter that every grant changes (spendSince).
func spendOnce(avail, lastSpend *atomic.Int64, v, ns, grain, cost int64) (left int64, ok, moved bool) {
	if v < cost {
		return v, false, false
	}
	// Dated first: a report that counts the spend is never dated before
	// it.
	if ns > lastSpend.Load() {
		storeMax(lastSpend, ns+grain)
	}
	if avail.CompareAndSwap(v, v-cost) {
		return v - cost, true, false
	}
	return 0, false, true
}

// takeAll sets r's remainder aside (r held locked) and returns it; base
// keeps it until the caller has built its request.
func (r *allowance) takeAll() int64 { return r.avail.Swap(0) }

// give adds n units to r's remainder (r held locked).
func (r *allowance) give(n int64) {
	r.base += n
	r.avail.Add(n)
}

// publish replaces sh.hot by a table of sh.recs (sh.mu held), and then
// sh.hotKeys: a decision that sees a key's bit sees the table with its
// allowance, and one that misses it (a key just made hot) goes on to
// the shard's lock, where recs has it.
func (sh *allowShard) publish() {
	var bits uint64
	for _, r := range sh.recs {
		bits |= hotBit(r.h)
	}
	sh.hot.Store(newHotTable(sh.recs))
	sh.hotKeys.Store(bits)
}

// hotBit is the bit of hash h in allowShard.hotKeys: 6 bits of h below
// those that pick the shard, above those that pick a table slot.
func hotBit(h uint64) uint64 { return 1 << (h >> (58 - shardBits) & 63) }

func newAllowances(s *Store, lease time.Duration, max int) *allowances {
	var id [7]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	a := &allowances{s: s, stats: &s.stats, holder: base32.HexEncoding.WithPadding(base32.NoPadding).EncodeToString(id[:]),
		lease: lease, period: lease / 2, max: int64(max), nudge: make(chan *allowance, nudgeQueue),
		stop: make(chan struct{}), anchor: time.Now(), seed: maphash.MakeSeed()}
	a.anchorNs = a.anchor.UnixNano()
	a.abandoned, a.abandon = context.WithCancel(context.Background())
	if s.clock == nil {
		// With Options.Clock the scripts decide at the clock's µs, and the
		// tests that set one count on spends dated as they were made.
		a.grain = int64(spendGrain)
	}
	for i := range a.shards {
		a.shards[i].recs = map[string]*allowance{}
		a.shards[i].heat = map[string]heat{}
	}
	return a
}

// start starts the renewal goroutine unless it runs or the store closed.
func (a *allowances) start() {
	a.runMu.Lock()
	defer a.runMu.Unlock()
	if a.running || a.closed.Load() {
		return
	}
	a.running = true
	a.wg.Add(1)
	go a.run()
}

// stopBackground stops the store's goroutines and waits for them to end;
// a.closed is set. A goroutine is started under runMu or coldDue.mu, after
// a look at a.closed, so taking each lock once here orders every start
// before the wait or after the close.
func (a *allowances) stopBackground() {
	a.runMu.Lock()
	//lint:ignore SA2001 an empty section orders the starts (see above)
	a.runMu.Unlock()
	a.coldDue.mu.Lock()
	//lint:ignore SA2001 an empty section orders the starts (see above)
	a.coldDue.mu.Unlock()
	close(a.stop)
	a.wg.Wait()
}

// idle stops the renewal goroutine (reporting true) if the store holds no
// allowance.
func (a *allowances) idle() bool {
	a.runMu.Lock()
	defer a.runMu.Unlock()
	if a.count.Load() > 0 {
		return false
	}
	a.running = false
	return true
}

// now is the store's clock, or the wall clock when the allowances were
// made plus the monotonic time since: a decision reads one clock where
// time.Now reads two (on virtual machines, a good part of a local
// decision's cost), and local times never go back.
func (a *allowances) now() time.Time {
	if a.s.clock != nil {
		return a.s.clock.Now()
	}
	return a.anchor.Add(time.Since(a.anchor))
}

// nowNs is now as Unix ns, read without making a time.Time: the clock of
// the decisions that take no lock.
func (a *allowances) nowNs() int64 {
	if a.s.clock != nil {
		return a.s.clock.Now().UnixNano()
	}
	return a.anchorNs + int64(time.Since(a.anchor))
}

// shard is the shard of the Redis key rk.
func (a *allowances) shard(rk string) *allowShard { return a.shardAt(a.hash(rk)) }

// hash is the hash of the Redis key rk that picks its shard and its slot
// in the shard's cold leases.
func (a *allowances) hash(rk string) uint64 { return maphash.String(a.seed, rk) }

func (a *allowances) shardAt(h uint64) *allowShard { return &a.shards[h>>(64-shardBits)] }

// get returns key's allowance under rk, making one when the key has become
// hot, or nil: the decision takes the one-trip path. Only decisions
// answered count towards heat (see warm): calls that gave up, on a frozen
// or unreachable server, never make a key hot.
func (a *allowances) get(rkb []byte, key string, p limit.Policy) *allowance {
	h := maphash.Bytes(a.seed, rkb)
	sh := a.shardAt(h)
	if r := sh.held(h, rkb); r != nil {
		return r
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return a.getLocked(sh, rkb, key, p)
}

// held returns the allowance of rkb (h its hash), if any, without sh.mu.
func (sh *allowShard) held(h uint64, rkb []byte) *allowance {
	if sh.hotKeys.Load()&hotBit(h) == 0 {
		return nil
	}
	if t := sh.hot.Load(); t != nil {
		return t.get(h, unsafe.String(unsafe.SliceData(rkb), len(rkb)))
	}
	return nil
}

// takePlace counts an allowance about to be made, if fewer than the cap
// are held.
func (a *allowances) takePlace() bool { return addBelow(&a.count, a.max) }

// addBelow adds one to n if n is below max, and reports whether it did: by
// compare-and-swap, so that callers on keys of different shards, each
// under its own shard's lock, never take n past max together.
func addBelow(n *atomic.Int64, max int64) bool {
	for {
		v := n.Load()
		if v >= max {
			return false
		}
		if n.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

// getLocked is get with sh.mu held.
func (a *allowances) getLocked(sh *allowShard, rkb []byte, key string, p limit.Policy) *allowance {
	if r := sh.recs[string(rkb)]; r != nil {
		return r
	}
	if a.closed.Load() {
		return nil
	}
	h, ok := sh.heat[string(rkb)]
	if !ok || p.Validate() != nil {
		return nil
	}
	rk := string(rkb)
	now := a.now()
	h.roll(now.UnixNano() / int64(a.period))
	if h.streak < warmPeriods || !a.takePlace() {
		sh.heat[rk] = h
		return nil
	}
	delete(sh.heat, rk)
	// The first rate: the cost decided in the last busy period, or, when
	// all of it was cost 0, one unit a decision.
	first := h.prevCost
	if first == 0 {
		first = int64(h.prev)
	}
	r := &allowance{sh: sh, rk: rk, h: a.hash(rk), key: key, p: p, rateAt: now,
		rate: float64(first) / a.period.Seconds()}
	r.rateAtNs.Store(now.UnixNano())
	r.lastUse.Store(now.UnixNano())
	r.tgt.Store(a.target(r))
	if h.retryAt > now.UnixNano() {
		// A decision the one-trip path refused is still to come back:
		// the first takes must not set a refusal time after its own.
		r.promised.Store(h.retryAt)
		r.refused.Store(h.retryCost)
	}
	sh.recs[rk] = r
	sh.publish()
	a.start()
	return r
}

// warm counts a decision of cost on rk answered by the one-trip path, and
// remembers the retry time of a denial: the key's allowance, made now or
// later, refuses nothing past it that the decision would need then.
func (a *allowances) warm(rk string, cost int64, d limit.Decision) {
	now := a.now()
	var retryAt time.Time
	if !d.Allowed && d.Reason == limit.ReasonLimited && d.RetryAfter > 0 {
		retryAt = now.Add(d.RetryAfter)
	}
	hash := a.hash(rk)
	sh := a.shardAt(hash)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if r := sh.recs[rk]; r != nil {
		if !retryAt.IsZero() {
			// Sent one-trip by the allowance (see decide).
			r.mu.Lock()
			r.promise(retryAt.UnixNano(), cost)
			r.mu.Unlock()
		}
		return
	}
	if sh.cold.get(hash, rk) != nil || a.closed.Load() {
		return // decided here, not one-trip
	}
	idx := now.UnixNano() / int64(a.period)
	h, ok := sh.heat[rk]
	if !ok && len(sh.heat) >= maxHeat/shardCount {
		prune(sh, idx)
	}
	if !ok {
		h.idx = idx
	}
	h.roll(idx)
	h.count++
	h.cost += cost
	if ns := retryAt.UnixNano(); !retryAt.IsZero() && ns >= h.retryAt {
		h.retryAt, h.retryCost = ns, cost
	}
	sh.heat[rk] = h
}

// awaitFlight waits, with r.mu released, until r's call in flight (if any)
// is answered or ctx ends; r.mu is held again when it returns.
func (r *allowance) awaitFlight(ctx context.Context) {
	ch := r.flight
	if ch == nil {
		return
	}
	r.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
	r.mu.Lock()
}

// promise notes that a decision of cost refused on r's key was told to
// come back at t (Unix ns).
func (r *allowance) promise(t, cost int64) {
	storeMax(&r.refused, cost)
	storeMax(&r.promised, t)
}

// roll moves h to period idx: a streak goes on when the period before was
// busy and directly precedes idx.
func (h *heat) roll(idx int64) {
	if idx <= h.idx {
		return
	}
	if idx == h.idx+1 && h.count >= hotThreshold {
		h.streak++
		h.prev, h.prevCost = h.count, h.cost
	} else {
		h.streak, h.prev, h.prevCost = 0, 0, 0
	}
	h.idx, h.count, h.cost = idx, 0, 0
}

// prune forgets the heat of keys not decided in this period or the last.
func prune(sh *allowShard, idx int64) {
	for k, h := range sh.heat {
		if h.idx < idx-1 {
			delete(sh.heat, k)
		}
	}
	if len(sh.heat) >= maxHeat/shardCount {
		clear(sh.heat)
	}
}

// decide decides cost from r into dec; false sends the decision on the
// one-trip path, dec untouched.
func (a *allowances) decide(ctx context.Context, r *allowance, p limit.Policy, cost int64, dec *limit.Decision) bool {
	if cost > r.p.Limit || p != r.p {
		return false
	}
	if a.decideFast(r, cost, dec) {
		return true
	}
	d, ok := a.decideLocked(ctx, r, cost)
	if ok {
		*dec = d
	}
	return ok
}

// decideLocked is decide past decideFast, under r's lock.
func (a *allowances) decideLocked(ctx context.Context, r *allowance, cost int64) (dec limit.Decision, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if r.closed.Load() {
			// A give-back in flight is waited for: the one-trip path would
			// be refused for the units on their way back.
			r.awaitFlight(ctx)
			return limit.Decision{}, false
		}
		now := a.now()
		ns := now.UnixNano()
		storeMax(&r.lastUse, ns)
		a.expire(r, now)
		if ns < r.deadline.Load() {
			if left, ok := r.spend(ns, a.grain, cost); ok {
				return a.spent(r, cost, left), true
			}
		}
		if cost <= r.nbUnits && now.Before(r.askAt) {
			return a.refuse(r, ns, cost, r.notBefore.Sub(now), true), true
		}
		if r.flight != nil && a.refuseInFlight(r, ns, unixNano(r.flightAt), r.short) {
			return a.refuse(r, ns, cost, a.inFlightRetry(r, ns, unixNano(r.notBefore), cost), false), true
		}
		if r.flight != nil {
			// A call is in flight: its answer may bring the units.
			r.awaitFlight(ctx)
			if ctx.Err() != nil {
				return limit.Decision{}, false // the one-trip path answers with ctx's error
			}
			continue
		}
		if left, ok := a.windowLeft(r, now); ok && left < a.lease/4 {
			if cost <= r.nbUnits && now.Before(r.notBefore) {
				// Denied until the window's end at the last call: refused
				// here until then, since asking again would send every
				// decision of the window's last stretch to Redis.
				return a.refuse(r, ns, cost, r.notBefore.Sub(now), true), true
			}
			// Too little of the window is left for a lease to pay.
			return limit.Decision{}, false
		}
		r.demand.Add(cost)
		// Ask Redis for what the remainder lacks, the remainder itself
		// set aside: if the two cannot meet cost, it goes back and the
		// answer is the one-trip denial.
		held := r.takeAll()
		req := a.request(r, now, cost, held)
		r.base -= held
		res, answered, err := a.take(ctx, r, req, now, held)
		if !answered {
			// ctx ended first: the call goes on, and its answer is taken
			// in when it comes.
			return limit.Decision{}, false
		}
		if err != nil {
			// The call may have been applied: what was held may be gone.
			a.stats.expired.Add(held)
			return limit.Decision{}, false
		}
		a.stats.renewals.Add(1)
		a.apply(r, req, res, now, held)
		if r.avail.Load() >= cost {
			r.demand.Add(-cost) // counted again by the spend
			continue
		}
		if res.retry <= 0 {
			return limit.Decision{}, false
		}
		// Redis answered for the larger of cost and what was asked for:
		// that many are free for this store at the retry time, unless
		// others spend them first.
		wait := res.retry + a.backoff(r, req, res)
		r.begin()
		r.notBefore, r.nbUnits = now.Add(wait), min(max(cost, req.want), r.p.Limit)
		// Refused here until then, but asking Redis again after a period at
		// most: a state that changed meanwhile (Redis restarted empty, or
		// others gave units back) is seen within a period, as the one-trip
		// path sees it at once, for a call per period rather than one per
		// decision.
		r.askAt = a.askAt(r, now)
		r.promise(r.notBefore.UnixNano(), cost)
		r.end()
		a.local.add(1)
		return r.decision(false, wait, 0), true
	}
}

// decideFast decides cost from r into dec without r's lock, when it can:
// the remainder meets cost under a live lease, or the refusal state says
// no (see decide, which it answers as). False: decide under the lock, dec
// untouched.
func (a *allowances) decideFast(r *allowance, cost int64, dec *limit.Decision) bool {
	since := r.ver.Load() // before the clock (spendSince)
	ns := a.nowNs()
	// Dated a grain ahead, as the spends are: the decisions within it
	// write nothing for it, so that a refusal writes no line (below).
	if r.lastUse.Load() < ns {
		r.lastUse.Store(ns + a.grain)
	}
	if ns < r.deadline.Load() {
		left, ok, granted := r.spendSince(since, ns, a.grain, cost)
		if ok {
			*dec = a.spent(r, cost, left)
			return true
		}
		if granted {
			return false // decided under the lock, at a later clock read
		}
	}
	v := r.ver.Load()
	g := r.gate.Load()
	if v&1 != 0 || g == nil || r.closed.Load() {
		return false
	}
	var (
		retry   time.Duration
		promise bool
	)
	switch {
	case cost <= g.nbUnits && ns < g.askAt:
		retry, promise = time.Duration(g.notBefore-ns), true
	case g.flightAt != 0 && a.refuseInFlight(r, ns, g.flightAt, g.short):
		retry = a.inFlightRetry(r, ns, g.notBefore, cost)
	default:
		return false
	}
	if promise {
		r.promise(ns+int64(retry), cost)
	} else {
		storeMax(&r.refused, cost)
	}
	if r.ver.Load() != v {
		// The lock was taken meanwhile: what was read may be gone. The
		// promise stays noted, which only keeps more for the key.
		return false
	}
	if a.countRefused(r, ns) {
		r.demand.Add(cost)
	}
	a.local.add(1)
	*dec = r.decision(false, retry, 0)
	return true
}

// countRefused reports whether a decision refused on r at ns adds to r's
// demand. It does until the rate sample holds twice the limit, and twice
// the limit every 1.25 periods since the sample began: four times the rate
// at which target stops growing with the rate (see target), so that while
// the refusals go on up to the next take, the rate sets the target by the
// key's share alone, as it would counting every refusal. Past that,
// refusals leave the count as it is, so that a saturated key's refusals
// write nothing that decisions on the other processors read, as a refusal
// of the memory store writes nothing. A burst of refusals followed by
// silence until the take counts less than it was, and the take is smaller.
// Window keys count every refusal: their rate also bounds a take near the
// window's end.
func (a *allowances) countRefused(r *allowance, ns int64) bool {
	d, lim := r.demand.Load(), r.p.Limit
	if d < 2*lim || !bucketLike(r.p) {
		return true
	}
	// d - 2 lim < 1.6 lim (ns - rateAt) / period, without a division.
	return float64(d-2*lim)*float64(a.period) < 1.6*float64(lim)*float64(ns-r.rateAtNs.Load())
}

// spent counts a decision of cost allowed from r, which left left, and
// nudges the renewal goroutine when the remainder runs low.
func (a *allowances) spent(r *allowance, cost, left int64) limit.Decision {
	r.demand.Add(cost)
	a.local.add(1)
	if left*4 < r.tgt.Load() && !r.nudged.Load() && !r.inFlight() && r.nudged.CompareAndSwap(false, true) {
		select {
		case a.nudge <- r:
		default:
			r.nudged.Store(false)
		}
	}
	return r.decision(true, 0, left)
}

// refuseInFlight reports whether a decision at ns that r's remainder does
// not meet is refused at once while a call sent at flightAt is in flight:
// the key is saturated here (the last answer came back short or denied),
// and waiting for the call would slow every decision arriving meanwhile.
// The units it brings are spent by the decisions after it. Not when a
// refused decision's retry time came since the call was sent: it may be
// that decision, and what it was promised may be on its way.
func (a *allowances) refuseInFlight(r *allowance, ns, flightAt int64, short bool) bool {
	if !short || !bucketLike(r.p) || r.p.Rate.Count <= 0 {
		return false
	}
	pr := r.promised.Load()
	return pr <= flightAt || pr > ns
}

// inFlightRetry is the RetryAfter of a refusal by refuseInFlight: at least
// the refill of cost, as a one-trip denial on a full bucket's.
func (a *allowances) inFlightRetry(r *allowance, ns, notBefore, cost int64) time.Duration {
	refill := time.Duration(cost * int64(r.p.Rate.Period) / r.p.Rate.Count)
	return max(time.Duration(notBefore-ns), refill)
}

// askAt is until when r refuses locally after an answer at now (r held
// locked): notBefore, or a period after now if sooner. With no other
// holder, never past the retry time of a refused decision still to come
// back (told by the one-trip path before r was made, or by an earlier
// refusal): what this store holds and Redis has then meet that decision,
// although they may fall short of nbUnits. Other holders may take those
// units first anyway, and there the longer refusal saves calls.
func (a *allowances) askAt(r *allowance, now time.Time) time.Time {
	at := now.Add(min(r.notBefore.Sub(now), a.period))
	if pr := r.promised.Load(); r.holders <= 1 && pr > now.UnixNano() && pr < at.UnixNano() {
		at = time.Unix(0, pr)
	}
	return at
}

// refuse counts a decision of cost refused here on r (held locked) at ns,
// to be retried after retry. With promise, that time is one r keeps (see
// askAt); the in-flight refusal's is a lower bound, as a one-trip denial's
// on a full bucket, and is not kept.
func (a *allowances) refuse(r *allowance, ns, cost int64, retry time.Duration, promise bool) limit.Decision {
	r.demand.Add(cost)
	if promise {
		r.promise(ns+int64(retry), cost)
	} else {
		storeMax(&r.refused, cost)
	}
	a.local.add(1)
	return r.decision(false, retry, 0)
}

// expire drops what r holds once its local deadline has passed: the lease
// may have ended in Redis, which then counts the units spent. Unless a
// call is in flight (its answer settles the lease), r forgets the lease
// and its unreported spends too: the lease is charged in full at its end,
// and a report sent now on a lease that has ended would be charged again.
func (a *allowances) expire(r *allowance, now time.Time) {
	if now.UnixNano() < r.deadline.Load() {
		return
	}
	if h := r.takeAll(); h > 0 {
		a.stats.expired.Add(h)
		r.base -= h
	}
	if r.flight == nil {
		r.seq, r.base = 0, 0
	}
}

// target is how many units r should hold after a renewal: what this store
// decides on the key in a renewal period and a quarter, at most its share of
// half the limit among the key's holders; 0 while nothing is decided.
func (a *allowances) target(r *allowance) int64 {
	t := int64(math.Ceil(r.rate * a.period.Seconds() * 1.25))
	return min(t, r.p.Limit/(2*max(r.holders, 1)))
}

// decision is r's answer to a decision, left the remainder after it.
func (r *allowance) decision(allowed bool, retry time.Duration, left int64) limit.Decision {
	srv := r.srvRemain.Load()
	d := limit.Decision{Allowed: allowed, Limit: r.p.Limit, Remaining: left + srv,
		ResetAfter: time.Duration(r.reset.Load()), Policy: r.p.Name}
	if !allowed {
		d.Remaining = srv
		d.Reason, d.RetryAfter = limit.ReasonLimited, max(retry, time.Microsecond)
	}
	return d
}

// call is a request of r in flight: sent with r.mu held, which it releases
// while it waits for Redis (decisions spend the remainder meanwhile, or
// wait for this answer) and takes again.
type call struct {
	lendRequest
	at time.Time // local send time
}

// request prepares a take or renewal of r (held locked) at now: need is the
// cost of the decision waiting for it (0 for a renewal), held the remainder
// the call may keep. It updates r's rate.
//
// held is the remainder as the caller read it, still in base: the units
// spent and not reported are base - held.
func (a *allowances) request(r *allowance, now time.Time, need, held int64) call {
	used := r.base - held
	spentAt := int64(-1)
	if used > 0 && r.seq != 0 {
		last := time.Unix(0, r.lastSpend.Load())
		if a.s.clock != nil {
			// The scripts decide at the clock's µs: a spend is dated as
			// a one-trip decision at the same time would be.
			spentAt = last.UnixMicro()
		} else {
			// The server decided the last call after it was sent, so
			// this is at or after the spend's server time.
			spentAt = r.server + ceilMicros(last.Sub(r.sent)) + 1
		}
	}
	if el := now.Sub(r.rateAt); el >= a.period/8 {
		r.rate = (r.rate + float64(r.demand.Swap(0))/el.Seconds()) / 2
		r.rateAt = now
		r.rateAtNs.Store(now.UnixNano())
		r.tgt.Store(a.target(r))
	} else if el < 0 {
		r.rateAt = now // the clock went back
		r.rateAtNs.Store(now.UnixNano())
	}
	// At least the largest cost refused since: the decision told to come
	// back at the refusal time finds it in hand then, even if a renewal
	// (asking for the target alone) takes the units free at that time.
	want := max(a.target(r)-held, min(r.refused.Load(), r.p.Limit), 0)
	if left, ok := a.windowLeft(r, now); ok {
		// Units out at the window's end are forfeit.
		want = min(want, int64(math.Ceil(r.rate*left.Seconds())))
	}
	return call{lendRequest: lendRequest{op: lendTake, holder: a.holder, seq: r.seq, used: used,
		spentAt: spentAt, want: want, lease: a.lease, need: need, held: held, grid: takeGrid(r.p)}, at: now}
}

func ceilMicros(d time.Duration) int64 {
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// call sends req for r, held locked; r.mu is released while Redis answers.
func (a *allowances) call(ctx context.Context, r *allowance, req call) (lendResult, error) {
	ch := make(chan struct{})
	r.begin()
	r.flight, r.flightAt = ch, req.at
	r.end()
	r.mu.Unlock()
	res, err := a.s.lend(ctx, r.key, r.p, req.lendRequest)
	r.mu.Lock()
	r.begin()
	r.flight = nil
	r.end()
	close(ch)
	return res, err
}

// take sends a decision's take, req, for r (held locked), as call does,
// but on a context of its own, bounded as a renewal's: a decision whose
// ctx ends first leaves (answered false) while the call goes on, and its
// answer is taken in when it comes, so that a caller that gives up (a
// client gone, a short deadline) strands nothing in Redis. Decisions on
// the key meanwhile see the call in flight, as with call. now and held are
// the decision's time and the remainder set aside for the call.
func (a *allowances) take(ctx context.Context, r *allowance, req call, now time.Time, held int64) (res lendResult, answered bool, err error) {
	if ctx.Done() == nil {
		res, err = a.call(ctx, r, req)
		return res, true, err
	}
	ch := make(chan struct{})
	r.begin()
	r.flight, r.flightAt = ch, req.at
	r.end()
	// Guarded by r.mu: the answer, once in; whether the decision left.
	var (
		got, left bool
		gotRes    lendResult
		gotErr    error
	)
	in := make(chan struct{})
	go func() {
		cctx, cancel := a.bounded(context.WithoutCancel(ctx), max(a.lease, time.Second))
		res, err := a.s.lend(cctx, r.key, r.p, req.lendRequest)
		cancel()
		r.mu.Lock()
		if !left {
			got, gotRes, gotErr = true, res, err
			r.mu.Unlock()
			close(in)
			return
		}
		if err != nil {
			a.stats.expired.Add(held)
		} else {
			a.stats.renewals.Add(1)
			a.apply(r, req, res, now, held)
		}
		r.begin()
		r.flight = nil
		r.end()
		r.mu.Unlock()
		close(ch)
	}()
	r.mu.Unlock()
	select {
	case <-in:
	case <-ctx.Done():
	}
	r.mu.Lock()
	if !got {
		left = true
		return lendResult{}, false, ctx.Err()
	}
	r.begin()
	r.flight = nil
	r.end()
	close(ch)
	return gotRes, true, gotErr
}

// apply takes in the answer to req (r held locked); keep is the remainder
// set aside for the call, which r gets back if the lease goes on.
func (a *allowances) apply(r *allowance, req call, res lendResult, now time.Time, keep int64) {
	r.begin()
	defer r.end()
	r.base -= req.used
	if req.seq != 0 && !res.matched {
		// The lease had ended in Redis and been counted spent: what is
		// held under it, and its unreported spends, are gone.
		a.stats.expired.Add(r.takeAll() + keep)
		keep, r.base = 0, 0
	}
	if res.seq == 0 {
		a.stats.returned.Add(r.takeAll() + keep)
		r.base = 0
	} else {
		margin := max(time.Millisecond, res.lease/1000)
		r.deadline.Store(req.at.Add(res.lease - margin).UnixNano())
		r.give(keep + res.granted)
		a.stats.lent.Add(res.granted)
	}
	r.seq = res.seq
	r.srvRemain.Store(res.remaining)
	r.reset.Store(int64(res.reset))
	if res.holders >= r.holders || now.Sub(r.holdersAt) >= a.lease {
		// The most seen over a lease: off a take grid a holder's entry
		// leaves the ledger while it waits for its share (on a grid a
		// marker keeps it counted), and a store that counted fewer
		// holders would take a larger share than the others.
		r.holders, r.holdersAt = res.holders, now
		r.tgt.Store(a.target(r))
	}
	r.sent, r.server = req.at, res.now
	// Saturated here: the call asked for more than it got.
	r.short = res.granted < max(req.want, req.need-keep)
	r.nextTake = time.Time{}
	if res.retry > 0 {
		r.nextTake = now.Add(res.retry)
	}
	switch {
	case res.retry > 0 && res.retryUnits > 0 && res.granted < req.want && bucketLike(r.p):
		// The take came back short (met or not), and Redis will not have
		// another retryUnits (want, or fewer) free for this store before
		// the retry time: once the remainder is spent, costs up to those
		// are refused here until then, instead of taking the few units
		// refilled since (on a saturated key every holder would
		// otherwise call each time some are back: many small takes). As
		// after a denial, Redis is asked again after a period at most. A
		// refusal time still ahead stays: a refused decision was told to
		// come back then, and what this call took was free at it too, so
		// it is met then. A take met in full sets no wait: the call that
		// finds its units spent reports them (a state restarted empty
		// meanwhile is not charged with them) and waits from its answer.
		if !now.Before(r.notBefore) {
			r.notBefore = now.Add(res.retry + a.backoff(r, req, res))
			r.nbUnits = min(res.retryUnits, r.p.Limit)
		}
		r.askAt = a.askAt(r, now)
	case req.need == 0 || r.avail.Load() >= req.need:
		r.notBefore, r.askAt = time.Time{}, time.Time{}
	}
	if r.avail.Load() >= r.refused.Load() {
		r.refused.Store(0)
	}
}

// backoff is how much later than Redis's retry time r's next take waits
// after a short take or a denial while other stores hold the key: the
// refill of a share for each of them, a turn each. The retry time alone
// counts what is lent now, not the takes of the others waiting too, so at
// it a store would mostly find the units gone again (a call for a few
// units or none). The wait never makes RetryAfter early; it delays a
// refused cost by at most the refill of limit/2. Nothing on a key no
// other store holds, or once another want is free at once (retry 0).
func (a *allowances) backoff(r *allowance, req call, res lendResult) time.Duration {
	others := res.holders
	if res.seq != 0 {
		others-- // the caller's own lease
	}
	if res.retry <= 0 || others <= 0 || !bucketLike(r.p) || r.p.Rate.Count <= 0 || req.grid > 0 {
		// On a take grid every holder lacking units comes back at the
		// point its units are free: a point's refill is taken by those
		// there, not left for the next.
		return 0
	}
	return time.Duration(others * req.want * int64(r.p.Rate.Period) / r.p.Rate.Count)
}

// bucketLike reports whether p refills continuously (token bucket, GCRA),
// so that an allowance script's retry time says when the store's next take
// would be met in full.
func bucketLike(p limit.Policy) bool {
	return p.Algorithm == limit.TokenBucketAlgorithm || p.Algorithm == limit.GCRAAlgorithm
}

// due reports whether the renewal goroutine should call for r (held
// locked): its lease is half gone, or its remainder is low and Redis may
// have more, while the key is still in use.
func (a *allowances) due(r *allowance, now time.Time) bool {
	if r.closed.Load() || r.flight != nil || now.UnixNano()-r.lastUse.Load() >= int64(a.period) {
		return false
	}
	if r.seq != 0 && !now.Before(r.sent.Add(a.period)) {
		return true
	}
	return r.avail.Load()*4 < a.target(r) && !now.Before(r.nextTake) && !now.Before(r.notBefore)
}

// renew renews r in the background if it is due.
func (a *allowances) renew(r *allowance) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nudged.Store(false)
	now := a.now()
	a.expire(r, now)
	if !a.due(r, now) {
		return
	}
	// Decisions go on spending the remainder while the call is in flight;
	// the next call reports those spends.
	req := a.request(r, now, 0, r.avail.Load())
	// A renewal answered late is still good (its deadline counts from its
	// sending); one not answered strands what it was granted until the
	// lease ends.
	ctx, cancel := a.bounded(context.Background(), max(a.lease, time.Second))
	res, err := a.call(ctx, r, req)
	cancel()
	if err != nil {
		// Spend until the deadline already known; try again later.
		r.nextTake = now.Add(a.period / 4)
		return
	}
	a.stats.renewals.Add(1)
	a.stats.background.Add(1)
	a.apply(r, req, res, now, 0)
}

// giveBack returns r's units and closes it: later decisions on its key
// make a new allowance or take the one-trip path.
func (a *allowances) giveBack(ctx context.Context, r *allowance) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.flight != nil {
		ch := r.flight
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		r.mu.Lock()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	if r.closed.Load() {
		return nil
	}
	r.closed.Store(true)
	// Nothing is spent from here on.
	held := r.takeAll()
	if r.seq == 0 {
		r.base = 0
		return nil
	}
	if testHookGivingBack != nil {
		testHookGivingBack()
	}
	req := a.request(r, a.now(), 0, held)
	req.op, req.want = lendReturn, 0
	r.base -= held
	res, err := a.call(ctx, r, req)
	if err != nil {
		a.stats.expired.Add(held)
		return err
	}
	if res.matched {
		a.stats.returned.Add(held)
	} else {
		// The lease had ended in Redis and been counted spent.
		a.stats.expired.Add(held)
	}
	r.seq, r.base = 0, 0
	r.srvRemain.Store(res.remaining)
	return nil
}

// remove takes r out of the store's records if it is still there.
func (a *allowances) remove(r *allowance) bool {
	sh := a.shard(r.rk)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.recs[r.rk] != r {
		return false
	}
	delete(sh.recs, r.rk)
	sh.publish()
	a.count.Add(-1)
	return true
}

// drop gives back the allowance of rk, if any, before a decision that
// must see the Redis state alone (AllowAll, CountAll, Settle, Reset).
func (a *allowances) drop(ctx context.Context, rk string) error {
	if err := a.dropCold(ctx, rk); err != nil {
		return err
	}
	sh := a.shard(rk)
	sh.mu.Lock()
	r := sh.recs[rk]
	if r != nil {
		delete(sh.recs, rk)
		sh.publish()
		a.count.Add(-1)
	}
	sh.mu.Unlock()
	if r == nil {
		return nil
	}
	return a.giveBack(ctx, r)
}

// run is the store's renewal goroutine: it renews allowances that run low
// (nudged by the decision that found them low) or whose lease is half
// gone, and gives back those of keys that cooled (no decision for a
// period). It ends when none is left, or when the store closes.
func (a *allowances) run() {
	defer a.wg.Done()
	t := time.NewTicker(max(a.period/8, time.Millisecond))
	defer t.Stop()
	var recs []*allowance
	for {
		select {
		case <-a.stop:
			return
		case r := <-a.nudge:
			a.renew(r)
			continue
		case <-t.C:
		}
		recs = recs[:0]
		for i := range a.shards {
			sh := &a.shards[i]
			sh.mu.Lock()
			for _, r := range sh.recs {
				recs = append(recs, r)
			}
			sh.mu.Unlock()
		}
		for _, r := range recs {
			select {
			case <-a.stop:
				return
			default:
			}
			if a.cold(r) {
				// Given back before it leaves the records: a decision
				// meanwhile finds it and waits for the give-back (see
				// decide), where, sent to Redis at once, it would be
				// refused for the units on their way back. Bounded as an
				// awaited answer is, at least a second: half of a short
				// lease is too little time on a loaded machine.
				ctx, cancel := a.bounded(context.Background(), a.lateFor())
				_ = a.giveBack(ctx, r) // on failure the lease ends in Redis on its own
				cancel()
				a.remove(r)
				continue
			}
			a.renew(r)
		}
		clear(recs)
		if a.idle() {
			return
		}
	}
}

// bounded is context.WithTimeout(parent, d) for a call or wait of the
// store's background, ended too when Close's context ends (abandoned).
func (a *allowances) bounded(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(parent, d)
	stop := context.AfterFunc(a.abandoned, cancel)
	return ctx, func() { stop(); cancel() }
}

// cold reports whether r's key has had no decision for a period.
func (a *allowances) cold(r *allowance) bool {
	r.mu.Lock() // changes nothing: fast decisions go on
	defer r.mu.Unlock()
	return r.flight == nil && a.now().UnixNano()-r.lastUse.Load() >= int64(a.period)
}

// close stops the renewal goroutine and gives every allowance back.
func (a *allowances) close(ctx context.Context) error {
	if a.closed.Swap(true) {
		return nil
	}
	// Once ctx ends, so does the background's every wait: Close returns
	// by ctx, and what those calls would have taken in or given back is
	// left to end in Redis, as is what ctx leaves unreturned.
	defer context.AfterFunc(ctx, a.abandon)()
	a.stopBackground()
	// The allowances stay in the records until they are given back: a
	// decision on one meanwhile spends what it holds, or waits for its
	// give-back (which holds its lock) and then takes the one-trip path,
	// finding the units returned; taking that path at once would refuse
	// requests the returning units admit.
	var recs []*allowance
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		for _, r := range sh.recs {
			recs = append(recs, r)
		}
		clear(sh.heat)
		sh.mu.Unlock()
	}
	defer func() {
		for i := range a.shards {
			sh := &a.shards[i]
			sh.mu.Lock()
			clear(sh.recs)
			sh.publish()
			sh.mu.Unlock()
		}
		a.count.Store(0)
	}()
	if testHookGiveBack != nil {
		testHookGiveBack()
	}
	first := parallel(len(recs), closeWorkers, func(i int) error { return a.giveBack(ctx, recs[i]) })
	if err := a.closeCold(ctx); err != nil && first == nil {
		first = err
	}
	return first
}

// parallel runs f(i) for every i in [0, n) on at most workers goroutines
// and returns the first error.
func parallel(n, workers int, f func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  atomic.Int64
	)
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				if err := f(int(i)); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// testHookGiveBack, when set, runs in close before the give-backs.
var testHookGiveBack func()

// testHookGivingBack, when set, runs in giveBack once the allowance is
// closed and before its units are sent back.
var testHookGivingBack func()

// testHookCountMove, when set, runs while an ending cold lease's decision
// count moves to its shard's: taken from the lease, not yet at the shard.
var testHookCountMove func()

// testHookColdRenewed, when set, sees the units granted by each early
// renewal's call and its error, and returns the error renewCold goes on
// with: a test loses an answer by returning one for a call that was applied.
var testHookColdRenewed func(granted int64, err error) error

// testHookColdAsked, when set, runs when a one-trip decision of a store
// that asked for a cold lease is answered (granted units), before the
// lease is kept; testHookAskWait when a decision Redis refused is about to
// wait for another's ask.
var (
	testHookColdAsked func(s *Store, granted int64)
	testHookAskWait   func(s *Store)
)

// testHookCallerLeft, when set, runs when the caller of a batched call of
// s leaves, before it drops the call; queued reports whether no batch has
// taken or dropped it yet.
var testHookCallerLeft func(s *Store, queued func() bool)

// kill stops the allowance work without giving anything back, as if the
// process had died, and returns the units held unspent. For tests.
func (a *allowances) kill() (held int64) {
	a.closed.Store(true)
	a.stopBackground()
	a.waitColdRenewals()
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		for _, r := range sh.recs {
			r.mu.Lock()
			r.closed.Store(true)
			held += r.takeAll()
			r.mu.Unlock()
		}
		clear(sh.recs)
		sh.publish()
		sh.cold.each(func(c *coldLease) bool {
			_, left := c.end(sh)
			held += left
			a.coldLeases.dropped()
			return true
		})
		sh.mu.Unlock()
	}
	return held
}
