package limit

import (
	"context"
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// FullPolicy says what a memory store does with a new key when it holds its
// maximum number of keys and none of them is at rest. Keys at rest (a state
// equal to a fresh key's: a full bucket, an ended window) always go first,
// and losslessly: while the store holds one, no key that spent anything is
// dropped, whatever the policy.
type FullPolicy uint8

const (
	// EvictLRU drops, of a sample of 8 keys of the new key's shard, the one
	// that spent least (so that its eviction forgives least), the least
	// recently used of those that spent as little. Its spent cost is
	// forgotten, so the eviction is lossy; MemoryStats.Evicted counts each.
	// A key under a flood of new keys thus keeps its state while the flood's
	// keys, each of which spent little, make room for each other.
	EvictLRU FullPolicy = iota
	// RefuseNewKeys denies decisions on new keys with ReasonKeyLimit and
	// ErrTooManyKeys until keys come back to rest.
	RefuseNewKeys
)

// MemoryOptions configure NewMemory. The zero value is a valid
// configuration: 256 shards, 1,048,576 keys, EvictLRU, the system clock.
type MemoryOptions struct {
	// Shards is the number of shards of each policy's table, each a map
	// under its own lock: a power of two. Default 256.
	Shards int
	// MaxKeys bounds the keys held over all policies. Default 1,048,576.
	MaxKeys int
	// WhenFull chooses between evicting and refusing when MaxKeys is
	// reached. Default EvictLRU.
	WhenFull FullPolicy
	// Clock tells the time. Default the system clock, read as the wall
	// time when the store is made plus the monotonic time since, so that
	// a decision reads one clock and the time never goes back.
	Clock Clock
}

// MemoryStats counts what a memory store holds and has dropped.
type MemoryStats struct {
	// Keys is the number of keys held.
	Keys int64
	// Cleaned is the number of keys dropped because they were back at rest,
	// which loses nothing.
	Cleaned int64
	// Evicted is the number of keys dropped by EvictLRU while not at rest:
	// lossy evictions, each forgetting what the key had spent.
	Evicted int64
	// Refused is the number of decisions refused by RefuseNewKeys.
	Refused int64
}

// Memory is the in-memory Store: for each policy a table of power-of-two
// shards, each an open-addressing table of 32-byte slots (aligned on cache
// lines in large tables), with an 8-byte word per slot beside them (the rolling window: a
// map of logs), under its own mutex. A decision on a key already
// held hashes the key once and allocates nothing; under the token bucket or
// GCRA it takes no lock either, but swaps the key's state, packed in one
// word, atomically, so that concurrent decisions on one key neither wait
// for each other nor fail, and stay exact. Memory holds at most
// MaxKeys keys; keys back at rest are dropped as new keys come in (a small
// sample of the shard each time, and at MaxKeys every key at rest of a shard
// that may hold one: each shard keeps a bound on when its first key comes
// to rest) and by Cleanup, which never holds a shard's lock for more than 64
// slots. The context of the methods is not consulted:
// they never wait for anything but a shard's lock (a decision without the
// lock retries its swap only when another change landed first).
//
// A key held takes 53 to 84 B of heap under the token bucket, GCRA and the
// fixed and sliding windows, as the shards' tables go from 7/8 full to just
// doubled, and 163 to 184 B under the rolling window with one entry in its
// log (BenchmarkMemoryHeapPerKey, 10,000 to 2,097,152 keys); the key's own
// bytes come on top unless the caller's string is kept anyway.
//
// Memory is safe for concurrent use.
type Memory struct {
	clock    Clock
	maxKeys  int64
	whenFull FullPolicy
	nshards  int
	seed     maphash.Seed
	start    int64 // µs; slot.used counts seconds from it

	// Without a Clock, the time is the wall clock when the store was made
	// plus the monotonic time since: time.Since reads one clock where
	// time.Now reads two, and on virtual machines without a fast clock
	// source that read is most of a decision's cost.
	anchor      time.Time
	anchorMicro int64

	tables atomic.Pointer[map[Policy]*table] // copied on write under tmu
	last   atomic.Pointer[table]             // the table used last: most stores use one policy
	tmu    sync.Mutex
	nextID atomic.Uint64

	keys, cleaned, evicted, refused atomic.Int64
	rest                            restBound // over every shard of every table
}

// restBound is a time (µs) before which no key of a store is at rest, so
// that a store at MaxKeys knows without looking at its shards that it
// holds none. Shards lower it as they lower their own bound; a look at
// every shard raises it, unless a shard lowered its own meanwhile (ver).
type restBound struct {
	at  atomic.Int64
	ver atomic.Uint64
}

// lower lowers b to r; r is a shard's new bound, already stored.
func (b *restBound) lower(r int64) {
	b.ver.Add(1)
	for {
		at := b.at.Load()
		if r >= at || b.at.CompareAndSwap(at, r) {
			return
		}
	}
}

type table struct {
	p      Policy
	pr     params
	mask   uint64
	shards []shard

	rest    *restBound // the store's
	packs   bool       // the token bucket and GCRA: states packed in a word
	dbits   uint       // token bucket: the bits of the debt in the word
	maxDiff int64      // the largest time difference a word holds
}

// shard is one lock and its keys. A shard takes 128 bytes, so that shards
// never share a cache line, and what a decision on a packed slot reads
// without the lock (t.v) is in the first 64, which it only reads.
type shard struct {
	// mu is held by everything but a decision on a packed slot (see
	// packed.go): new keys, removals, the other algorithms, AllowAll,
	// Settle, Reset, Cleanup.
	mu   sync.Mutex
	t    slots                  // every algorithm but the rolling window
	id   uint64                 // lock order of AllowAll
	logs map[string]*rollingLog // rolling window only
	peak int                    // most logs held since the last sweep shrank logs
	// rest is a bound (µs) before which no key of the shard is at rest:
	// lowered under mu by every state written (see lowerRest), set exactly
	// by sweep, read without the lock by stores looking for keys at rest.
	rest atomic.Int64
	rq   *restQueue // the keys that come to rest first, from the last sweep
	_    [24]byte
}

// NewMemory returns an empty memory store, or a *PolicyError-like error
// naming the bad option.
func NewMemory(opts MemoryOptions) (*Memory, error) {
	if opts.Shards == 0 {
		opts.Shards = 256
	}
	if opts.Shards < 0 || opts.Shards&(opts.Shards-1) != 0 || opts.Shards > 1<<16 {
		return nil, &OptionError{Option: "Shards", Reason: "must be a power of two up to 65536"}
	}
	if opts.MaxKeys == 0 {
		opts.MaxKeys = 1 << 20
	}
	if opts.MaxKeys < 0 {
		return nil, &OptionError{Option: "MaxKeys", Reason: "must be positive"}
	}
	if opts.WhenFull > RefuseNewKeys {
		return nil, &OptionError{Option: "WhenFull", Reason: "unknown policy"}
	}

	m := &Memory{clock: opts.Clock, maxKeys: int64(opts.MaxKeys), whenFull: opts.WhenFull,
		nshards: opts.Shards, seed: maphash.MakeSeed()}
	m.anchor = time.Now()
	m.anchorMicro = m.anchor.UnixMicro()
	m.start = m.now()
	m.rest.at.Store(math.MaxInt64)
	m.tables.Store(&map[Policy]*table{})
	return m, nil
}

// table returns p's table, creating it on first use. The table used last
// is compared field by field, the strings last: they rarely differ.
func (m *Memory) table(p *Policy) (*table, error) {
	if t := m.last.Load(); t != nil && t.p.Limit == p.Limit && t.p.Rate == p.Rate &&
		t.p.Window == p.Window && t.p.Algorithm == p.Algorithm && t.p.Name == p.Name {
		return t, nil
	}
	return m.newTable(*p)
}

// newTable is table for a policy other than the one used last.
func (m *Memory) newTable(p Policy) (*table, error) {
	if t := (*m.tables.Load())[p]; t != nil {
		m.last.Store(t)
		return t, nil
	}
	pr, err := p.params()
	if err != nil {
		return nil, err
	}
	m.tmu.Lock()
	defer m.tmu.Unlock()
	old := *m.tables.Load()
	if t := old[p]; t != nil {
		return t, nil
	}
	t := &table{p: p, pr: pr, mask: uint64(m.nshards - 1), shards: make([]shard, m.nshards), rest: &m.rest}
	t.packing()
	for i := range t.shards {
		t.shards[i].id = m.nextID.Add(1)
		t.shards[i].t.base = m.start
		t.shards[i].rest.Store(math.MaxInt64)
		if pr.alg == algRolling {
			t.shards[i].logs = map[string]*rollingLog{}
		}
	}
	nt := make(map[Policy]*table, len(old)+1)
	for k, v := range old {
		nt[k] = v
	}
	nt[p] = t
	m.tables.Store(&nt)
	return t, nil
}

// shard returns key's hash and shard, picked by the hash's high bits (the
// slot table uses the low ones).
func (m *Memory) shard(t *table, key string) (uint64, *shard) {
	h := maphash.String(m.seed, key)
	return h, &t.shards[(h>>48)&t.mask]
}

// used returns now as slot.used: seconds since the store started.
func (m *Memory) used(now int64) uint32 {
	return uint32(min(max(0, (now-m.start)/1e6), 1<<32-1))
}

func (m *Memory) now() int64 {
	if m.clock == nil {
		return m.anchorMicro + int64(time.Since(m.anchor)/time.Microsecond)
	}
	return unixMicro(m.clock.Now())
}

// AllowN spends cost on key under p if the key has it. See Store.
func (m *Memory) AllowN(_ context.Context, key string, p Policy, cost int64) (dec Decision, err error) {
	if cost < 0 {
		return Decision{}, &CostError{Cost: cost}
	}
	t, err := m.table(&p)
	if err != nil {
		return Decision{}, err
	}
	now := m.now()
	h, sh := m.shard(t, key)
	if t.packs && m.allowPacked(&dec, t, sh, h, key, now, cost) {
		dec.Policy = p.Name
		return dec, nil
	}
	sh.mu.Lock()
	if t.pr.alg == algRolling {
		dec, err = m.allowRolling(t, sh, key, now, cost)
	} else {
		dec, err = m.allowState(t, sh, h, key, now, cost)
	}
	sh.mu.Unlock()
	dec.Policy = p.Name
	return dec, err
}

// allowState requires sh.mu.
func (m *Memory) allowState(t *table, sh *shard, h uint64, key string, now, cost int64) (Decision, error) {
	i := sh.t.find(h, key)
	var s state
	if i >= 0 {
		s = t.take(sh, i)
	}
	dec, ns := t.pr.decide(s, now, cost, false)
	if ns == s {
		if i >= 0 {
			t.keep(sh, i, s)
		}
		return dec, nil
	}
	if i < 0 {
		if err := m.admitKey(t, sh, h, now); err != nil {
			return refusal(t.pr.limit), err
		}
		i = sh.t.insert(h, key)
	}
	t.put(sh, i, ns, m.used(now))
	return dec, nil
}

// allowRolling requires sh.mu.
func (m *Memory) allowRolling(t *table, sh *shard, key string, now, cost int64) (Decision, error) {
	l := sh.logs[key]
	if l == nil {
		var fresh rollingLog
		dec := t.pr.decideRolling(&fresh, now, cost, 0, false)
		if !dec.Allowed || cost == 0 {
			return dec, nil
		}
		if err := m.admitKey(t, sh, 0, now); err != nil {
			return refusal(t.pr.limit), err
		}
		l = &rollingLog{}
		sh.logs[strings.Clone(key)] = l // a copy, as slots.insert keeps
		sh.peak = max(sh.peak, len(sh.logs))
	}
	dec := t.pr.decideRolling(l, now, cost, 0, true)
	t.lowerRest(sh, l.restAt(t.pr.w), -1, key)
	return dec, nil
}

func refusal(limit int64) Decision {
	return Decision{Reason: ReasonKeyLimit, Limit: limit}
}
