package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/envoyrl"
)

// Local allowances (Options.LocalAllowance; DESIGN-allowances.md): a
// counter decided often at this store takes several of its window's units
// in one script call, which adds them to the counter and records them in a
// ledger beside it, and spends them here.

const (
	defaultAllowancePeriod = 250 * time.Millisecond
	defaultMaxAllowances   = 4096
	hotHits                = 4 // hits in one period that make a counter hot
	allowanceShards        = 64
	maxSeen                = 1024 // descriptors not yet hot counted per shard and period
)

// takeScript lends units of KEYS[1], a counter, to the holder ARGV[5],
// recording them in the ledger KEYS[2]. ARGV: need (units the request in
// hand still needs), want (units asked for), limit, the counters' expiry in
// ms. When fewer than need are left it lends nothing and adds need to the
// counter, as the one-trip INCRBY of a refused request does. Otherwise it
// lends g, need <= g <= left, at most want and at most an equal share of
// what is left among the holders. It answers {g, counter after, holders
// including the caller, the ledger's sequence (0 when nothing was lent)}.
var takeScript = redis.NewScript(`
local need = tonumber(ARGV[1])
local want = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])
local holder = ARGV[5]
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
local left = limit - c
local k = redis.call('HLEN', KEYS[2])
local mine = redis.call('HGET', KEYS[2], holder)
if k > 0 then k = k - 1 end
if not mine then k = k + 1 end
if need > left then
  if need > 0 then
    c = redis.call('INCRBY', KEYS[1], need)
    if c == need then redis.call('PEXPIRE', KEYS[1], ttl) end
  end
  return {0, c, k, 0}
end
local g = math.floor(left / k)
if g > want then g = want end
if g < need then g = need end
c = redis.call('INCRBY', KEYS[1], g)
if c == g then redis.call('PEXPIRE', KEYS[1], ttl) end
local seq = redis.call('HINCRBY', KEYS[2], '#', 1)
local held = g
if mine then held = held + tonumber(string.match(mine, '^(%d+)')) end
redis.call('HSET', KEYS[2], holder, held .. ':' .. seq)
redis.call('PEXPIRE', KEYS[2], ttl)
return {g, c, k, seq}
`)

// returnScript gives back ARGV[1] unspent units of KEYS[1] lent to the
// holder ARGV[3] under the lease ARGV[2] (its latest sequence), while the
// window lasts: the server's clock is before ARGV[4], the window's end in
// Unix ms. A stale lease (already given back, or the ledger gone with its
// window or with the server's data), a window that has ended or a counter
// that no longer exists gives nothing back. It answers the units given
// back.
var returnScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now >= tonumber(ARGV[4]) then return 0 end
local mine = redis.call('HGET', KEYS[2], ARGV[3])
if not mine then return 0 end
local held, seq = string.match(mine, '^(%d+):(%d+)$')
if tonumber(seq) ~= tonumber(ARGV[2]) then return 0 end
local n = tonumber(ARGV[1])
if n > tonumber(held) then n = tonumber(held) end
local c = tonumber(redis.call('GET', KEYS[1]) or '-1')
if c < n then return 0 end
redis.call('DECRBY', KEYS[1], n)
redis.call('HDEL', KEYS[2], ARGV[3])
return n
`)

// AllowanceStats are a store's allowance counts since New.
type AllowanceStats struct {
	// Local are the decisions answered from an allowance or a local
	// refusal, without a store call; Takes the take script calls, each
	// made by one decision, which its answer decides; Remote the
	// decisions sent on the one-trip path (batched INCRBY). Each counter
	// an Add decides counts in one of the three.
	Local, Takes, Remote uint64
	// Lent, Returned and Forfeited are units: taken, given back, and left
	// unspent when their window ended.
	Lent, Returned, Forfeited uint64
}

// lender is a store's allowances.
type lender struct {
	s      *Store
	holder string
	period time.Duration
	max    int
	now    func() time.Time
	seed   maphash.Seed
	shards [allowanceShards]lendShard
	size   atomic.Int64 // series held, all shards

	closed   atomic.Bool
	inflight sync.WaitGroup // take calls in flight
	stop     chan struct{}
	swept    chan struct{}
	back     chan struct{} // closed once close has given every allowance back
	// ended ends every script call of the lender (takes, give-backs) once
	// close's context has ended, so that Close returns by it.
	ended  context.Context
	endAll context.CancelFunc

	local, takes, remote, lent, returned, forfeited atomic.Uint64
}

type lendShard struct {
	mu     sync.Mutex
	m      map[string]*series // guarded by mu
	seen   map[string]uint64  // guarded by mu: hits on descriptors not yet hot, this period
	since  time.Time          // guarded by mu: when seen started
	closed bool               // guarded by mu: the store is closing
	_      [16]byte
}

// series is one descriptor's counters at this store, window after window:
// its rate here and the allowance of its current window. Guarded by its
// shard's lock.
type series struct {
	start time.Time // of the rate period
	hits  uint64    // hits in the period
	rate  float64   // hits per second, smoothed over periods
	last  time.Time // of the last decision

	key     string    // the counter the allowance is of; "" without one
	ledger  string    // its ledger
	end     int64     // its window's end, Unix seconds
	left    uint64    // units lent and not spent
	top     uint64    // the counter after the last take
	seq     int64     // the lease: the ledger's sequence at the last grant
	holders int64     // holders at the last take, this one included
	refuse  time.Time // refuse locally until then, when left falls short
	// taking is closed when the take or give-back in flight ends; nil
	// without one. returning says it is a give-back of the sweep.
	taking    chan struct{}
	returning bool
}

func newLender(s *Store, o Options) *lender {
	var id [7]byte
	_, _ = rand.Read(id[:])
	l := &lender{
		s:      s,
		holder: strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(id[:])),
		period: o.AllowancePeriod,
		max:    o.MaxAllowances,
		now:    o.Now,
		seed:   maphash.MakeSeed(),
		stop:   make(chan struct{}),
		swept:  make(chan struct{}),
		back:   make(chan struct{}),
	}
	l.ended, l.endAll = context.WithCancel(context.Background())
	if l.period <= 0 {
		l.period = defaultAllowancePeriod
	}
	if l.max <= 0 {
		l.max = defaultMaxAllowances
	}
	if l.now == nil {
		l.now = time.Now
	}
	for i := range l.shards {
		l.shards[i].m, l.shards[i].seen = map[string]*series{}, map[string]uint64{}
	}
	go l.sweeper()
	return l
}

// ledgerKey names the ledger of counter k, in k's hash slot; ok is false
// when no simple name shares the slot (such a counter is never lent).
func ledgerKey(k string) (string, bool) {
	if !strings.ContainsAny(k, "{}") {
		return "{" + k + "}.lent", true
	}
	l := k + ".lent"
	return l, Slot(l) == Slot(k)
}

// seriesOf is k without its window: the descriptor's counters share it.
func seriesOf(k string) string {
	if i := strings.LastIndexByte(k, '_'); i > 0 {
		return k[:i]
	}
	return k
}

func (l *lender) shard(name string) *lendShard {
	return &l.shards[maphash.String(l.seed, name)%allowanceShards]
}

// add decides the counters it can from allowances and passes the others,
// in one call, to plain.
func (l *lender) add(ctx context.Context, counters []envoyrl.Counter, plain func(context.Context, []envoyrl.Counter) error) error {
	if l.givenBack() {
		l.remote.Add(uint64(len(counters)))
		return plain(ctx, counters)
	}
	var cold []int
	for i := range counters {
		// A counter named twice in a call is counted in order: once one
		// of its additions goes to the batch, which runs after the others,
		// every later one does.
		hot := false
		if !sentCold(counters, cold, counters[i].Key) {
			var err error
			if hot, err = l.decide(ctx, &counters[i]); err != nil {
				return err
			}
		}
		if !hot {
			cold = append(cold, i)
		}
	}
	if len(cold) == 0 {
		return nil
	}
	l.remote.Add(uint64(len(cold)))
	if len(cold) == len(counters) {
		return plain(ctx, counters)
	}
	sub := make([]envoyrl.Counter, len(cold))
	for j, i := range cold {
		sub[j] = counters[i]
	}
	if err := plain(ctx, sub); err != nil {
		return err
	}
	for j, i := range cold {
		counters[i].Count = sub[j].Count
	}
	return nil
}

// sentCold reports whether one of the counters at cold is key.
func sentCold(counters []envoyrl.Counter, cold []int, key string) bool {
	for _, i := range cold {
		if counters[i].Key == key {
			return true
		}
	}
	return false
}

// get reads the counters this store holds an allowance of as their value
// less what it holds unspent, and the others from Redis.
func (l *lender) get(ctx context.Context, counters []envoyrl.Counter, plain func(context.Context, []envoyrl.Counter) error) error {
	var cold []int
	for i := range counters {
		c := &counters[i]
		sh := l.shard(seriesOf(c.Key))
		sh.mu.Lock()
		se := sh.m[seriesOf(c.Key)]
		held := se != nil && se.key == c.Key
		if held && sh.closed && se.left == 0 {
			// Being given back: read once Redis has it.
			sh.mu.Unlock()
			if err := l.awaitBack(ctx); err != nil {
				return err
			}
			held = false
		} else {
			if held {
				c.Count = se.top - se.left
			}
			sh.mu.Unlock()
		}
		if !held {
			cold = append(cold, i)
		}
	}
	if len(cold) == 0 {
		return nil
	}
	sub := make([]envoyrl.Counter, len(cold))
	for j, i := range cold {
		sub[j] = counters[i]
	}
	if err := plain(ctx, sub); err != nil {
		return err
	}
	for j, i := range cold {
		counters[i].Count = sub[j].Count
	}
	return nil
}

// decide answers c from its series' allowance when the series is hot here,
// taking units first when it holds too few; hot is false for a counter
// left to the one-trip path.
func (l *lender) decide(ctx context.Context, c *envoyrl.Counter) (hot bool, err error) {
	if c.Limit == 0 || c.End == 0 {
		return false, nil
	}
	name := seriesOf(c.Key)
	sh := l.shard(name)
	now := l.now()
	sh.mu.Lock()
	se := sh.m[name]
	if se == nil {
		// A descriptor is tracked once it has had hotHits hits in a
		// period; until then it costs one map entry, forgotten each period.
		if now.Sub(sh.since) >= l.period || len(sh.seen) >= maxSeen {
			clear(sh.seen)
			sh.since = now
		}
		n := sh.seen[name] + max(c.Hits, 1)
		if n < hotHits || l.size.Load() >= int64(l.max) || sh.closed {
			sh.seen[name] = n
			sh.mu.Unlock()
			return false, nil
		}
		delete(sh.seen, name)
		se = &series{start: now, hits: n - max(c.Hits, 1)}
		sh.m[name] = se
		l.size.Add(1)
	}
	if sh.closed {
		return l.closing(ctx, sh, se, c)
	}
	if se.returning {
		// The sweep is giving the series' units back: they are still
		// counted in Redis, where this decision, on either path, would be
		// refused for them. It waits for them, then starts over, as the
		// series may be gone by then.
		if err := l.wait(ctx, sh, se); err != nil {
			return true, err
		}
		sh.mu.Unlock()
		return l.decide(ctx, c)
	}
	se.record(now, c.Hits, l.period)
	if !se.hot(l.period) || (c.Hits == 0 && se.key != c.Key) {
		sh.mu.Unlock()
		return false, nil
	}
	for {
		if sh.closed {
			return l.closing(ctx, sh, se, c)
		}
		if se.key != c.Key {
			ledger, ok := ledgerKey(c.Key)
			if !ok || c.End < se.end {
				// A decision of a window this store has left (its clock read
				// before another's) takes the one-trip path.
				sh.mu.Unlock()
				return false, nil
			}
			if se.taking != nil { // a take for another window is in flight
				if err := l.wait(ctx, sh, se); err != nil {
					return true, err
				}
				continue
			}
			l.forfeited.Add(se.left)
			*se = series{start: se.start, hits: se.hits, rate: se.rate, last: se.last,
				key: c.Key, ledger: ledger, end: c.End, holders: se.holders}
		}
		switch {
		case c.Hits <= se.left:
			se.left -= c.Hits
			c.Count = se.top - se.left
			sh.mu.Unlock()
			l.local.Add(1)
			return true, nil
		case now.Before(se.refuse):
			// The counter had too few units at the last take: refused here,
			// the units held counted as this request's hits, as INCRBY would.
			se.left = 0
			c.Count = max(se.top, c.Limit) + c.Hits
			sh.mu.Unlock()
			l.local.Add(1)
			return true, nil
		case se.taking != nil:
			if err := l.wait(ctx, sh, se); err != nil {
				return true, err
			}
			continue
		}
		return true, l.take(ctx, sh, se, c, now)
	}
}

// closing decides c while the store closes, with sh locked; it unlocks sh.
// No take starts: c spends what the series holds unspent, or, when that is
// too little, waits until close has given the allowances back and takes the
// one-trip path, which then finds the units returned (taking it at once
// would refuse requests the units about to come back would admit).
func (l *lender) closing(ctx context.Context, sh *lendShard, se *series, c *envoyrl.Counter) (hot bool, err error) {
	if se.key != c.Key {
		sh.mu.Unlock()
		return false, nil
	}
	if c.Hits <= se.left {
		se.left -= c.Hits
		c.Count = se.top - se.left
		sh.mu.Unlock()
		l.local.Add(1)
		return true, nil
	}
	sh.mu.Unlock()
	if err := l.awaitBack(ctx); err != nil {
		return true, err
	}
	return false, nil
}

// givenBack reports whether close has given every allowance back.
func (l *lender) givenBack() bool {
	select {
	case <-l.back:
		return true
	default:
		return false
	}
}

// awaitBack waits until close has given every allowance back or ctx ends.
func (l *lender) awaitBack(ctx context.Context) error {
	select {
	case <-l.back:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wait releases sh's lock until se's take in flight ends or ctx does, and
// takes it again unless ctx ended.
func (l *lender) wait(ctx context.Context, sh *lendShard, se *series) error {
	ch := se.taking
	sh.mu.Unlock()
	select {
	case <-ch:
		sh.mu.Lock()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// take asks Redis for units of c's counter, c's own hits first, and
// decides c from the answer. It is called with sh locked and unlocks it.
func (l *lender) take(ctx context.Context, sh *lendShard, se *series, c *envoyrl.Counter, now time.Time) error {
	have := se.left // spent on c, whatever the answer
	se.left = 0
	need := c.Hits - have
	rest := time.Unix(c.End, 0).Sub(now)
	rate := max(se.rate, float64(se.hits)/l.period.Seconds())
	want := uint64(math.Ceil(1.25 * rate * min(l.period, rest).Seconds()))
	want = min(max(want, need), c.Limit)
	ch := make(chan struct{})
	se.taking = ch
	key, ledger := se.key, se.ledger
	l.inflight.Add(1)
	sh.mu.Unlock()

	g, top, holders, seq, err := l.call(ctx, key, ledger, need, want, c)

	sh.mu.Lock()
	defer func() {
		se.taking = nil
		close(ch)
		sh.mu.Unlock()
		l.inflight.Done()
	}()
	l.takes.Add(1)
	if err != nil {
		se.left += have // still ours; what the call may have lent is lost
		return err
	}
	l.lent.Add(g)
	// The counter as this take left it, not the highest seen: one that
	// Redis lost (restarted empty) counts again from zero, and a count
	// kept from before would refuse the units the new one lends.
	se.top, se.holders = top, holders
	if g == 0 {
		c.Count = top
		se.refuse = now.Add(min(l.period, rest))
		return nil
	}
	se.seq = seq
	se.left += g - need
	c.Count = top - se.left
	se.refuse = time.Time{}
	return nil
}

// call runs the take script, bounded by ctx or, without a deadline, by
// batchTimeout, whatever the client's options (see bounded).
func (l *lender) call(ctx context.Context, key, ledger string, need, want uint64, c *envoyrl.Counter) (g, top uint64, holders, seq int64, err error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, batchTimeout)
		defer cancel()
	}
	ctx, unbind := l.bound(ctx)
	defer unbind()
	ttl := c.TTL.Milliseconds()
	if j := l.s.jitter; j > 0 {
		ttl = jittered(ttl, j)
	}
	vals, err := bounded(ctx, func(ctx context.Context) ([]int64, error) {
		return takeScript.Run(ctx, l.s.client, []string{key, ledger},
			need, want, c.Limit, max(ttl, 1), l.holder).Int64Slice()
	})
	if err != nil {
		return 0, 0, 0, 0, err
	}
	if len(vals) != 4 || vals[0] < 0 || vals[1] < 0 {
		return 0, 0, 0, 0, fmt.Errorf("redisstore: the take script answered %v", vals)
	}
	return uint64(vals[0]), uint64(vals[1]), vals[2], vals[3], nil
}

// record counts hits in the rate period, starting a new period when this
// one has lasted period.
func (se *series) record(now time.Time, hits uint64, period time.Duration) {
	if d := now.Sub(se.start); d >= period {
		r := float64(se.hits) / d.Seconds()
		if se.rate == 0 || d >= 4*period {
			se.rate = r
		} else {
			se.rate = (se.rate + r) / 2
		}
		se.start, se.hits = now, 0
	}
	se.hits += max(hits, 1)
	se.last = now
}

// hot reports whether the series' rate, or its hits in the current
// period, make an allowance worth its calls.
func (se *series) hot(period time.Duration) bool {
	return se.hits >= hotHits || se.rate*period.Seconds() >= hotHits
}

// sweeper gives back the allowances of series that have cooled and forgets
// idle series, every period until close.
func (l *lender) sweeper() {
	defer close(l.swept)
	t := time.NewTicker(l.period)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.sweep(context.Background(), false)
		}
	}
}

// lease is an allowance to give back. A cooling sweep's also names its
// series and the channel that its decisions wait on.
type lease struct {
	key, ledger string
	left        uint64
	seq         int64
	end         int64
	sh          *lendShard
	se          *series
	done        chan struct{}
}

// sweep gives back what cooled series hold, or, with all, what every
// series holds, and forgets series idle for long.
func (l *lender) sweep(ctx context.Context, all bool) {
	now := l.now()
	var back []lease
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for name, se := range sh.m {
			idle := now.Sub(se.last)
			if se.taking != nil {
				continue
			}
			if se.left > 0 && (all || idle >= 2*l.period) {
				if now.Unix() < se.end {
					b := lease{key: se.key, ledger: se.ledger, left: se.left, seq: se.seq, end: se.end}
					if !all {
						// Decisions on the series wait for the give-back
						// (see decide); on close, closing does.
						b.sh, b.se, b.done = sh, se, make(chan struct{})
						se.taking, se.returning = b.done, true
					}
					back = append(back, b)
					// The units leave what this store counts now: a read
					// during the give-back or after it (top - left) counts
					// what was spent, as Redis will once they are back.
					se.top -= se.left
				} else {
					l.forfeited.Add(se.left)
				}
				se.left = 0
			}
			// Close keeps the series: a decision on one being given back
			// waits for the give-back (see closing).
			if !all && idle >= 8*l.period && se.left == 0 && se.taking == nil {
				delete(sh.m, name)
				l.size.Add(-1)
			}
		}
		sh.mu.Unlock()
	}
	if all && testHookGiveBack != nil {
		testHookGiveBack()
	}
	if !all && len(back) > 0 && testHookCoolGiveBack != nil {
		testHookCoolGiveBack()
	}
	for _, b := range back {
		n := l.giveBack(ctx, b)
		if b.done != nil {
			b.sh.mu.Lock()
			if b.se.key == b.key {
				// What Redis did not take back it still counts.
				b.se.top += b.left - n
			}
			b.se.taking, b.se.returning = nil, false
			close(b.done)
			b.sh.mu.Unlock()
		}
	}
}

// testHookGiveBack, when set, runs in close between taking the units from
// the series and giving them back.
var testHookGiveBack func()

// testHookCoolGiveBack, when set, runs in a cooling sweep between taking the
// units from the series and giving them back.
var testHookCoolGiveBack func()

// giveBack returns one lease's unspent units and reports how many Redis
// took back; what it does not take back is forfeited.
func (l *lender) giveBack(ctx context.Context, b lease) uint64 {
	ctx, cancel := context.WithTimeout(ctx, batchTimeout)
	defer cancel()
	ctx, unbind := l.bound(ctx)
	defer unbind()
	n, err := bounded(ctx, func(ctx context.Context) (int64, error) {
		return returnScript.Run(ctx, l.s.client, []string{b.key, b.ledger},
			b.left, b.seq, l.holder, b.end*1000).Int64()
	})
	if err != nil || n < 0 {
		n = 0
	}
	back := min(b.left, uint64(n))
	l.returned.Add(uint64(n))
	l.forfeited.Add(b.left - back)
	return back
}

// close stops the sweeper and, after the takes in flight, gives back every
// allowance, bounded by ctx. Decisions meanwhile spend what is held; those
// it cannot meet wait for the give-back (see closing).
func (l *lender) close(ctx context.Context) {
	if !l.closed.CompareAndSwap(false, true) {
		<-l.back
		return
	}
	defer close(l.back)
	// Once ctx ends, so do the takes in flight and the sweeper's
	// give-backs: Close returns by it, and what they would have taken in
	// or given back stays lent until its window ends.
	defer context.AfterFunc(ctx, l.endAll)()
	close(l.stop)
	<-l.swept
	// A decision reads its shard's closed under the shard's lock and
	// counts its take in flight before letting go of it: once every shard
	// is closed, no take starts.
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		sh.closed = true
		sh.mu.Unlock()
	}
	l.inflight.Wait()
	l.sweep(ctx, true)
}

func (l *lender) stats() AllowanceStats {
	return AllowanceStats{
		Local: l.local.Load(), Takes: l.takes.Load(), Remote: l.remote.Load(),
		Lent: l.lent.Load(), Returned: l.returned.Load(), Forfeited: l.forfeited.Load(),
	}
}

// AllowanceHolder is the name of the store's entries in the ledgers beside
// the counters, drawn at random by New; "" without Options.LocalAllowance.
func (s *Store) AllowanceHolder() string {
	if s.lend == nil {
		return ""
	}
	return s.lend.holder
}

// AllowanceStats reports the store's allowance counts; zero without
// Options.LocalAllowance.
func (s *Store) AllowanceStats() AllowanceStats {
	if s.lend == nil {
		return AllowanceStats{}
	}
	return s.lend.stats()
}

// bound is ctx, ended also once close's context ends (ended).
func (l *lender) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(l.ended, cancel)
	return ctx, func() { stop(); cancel() }
}
