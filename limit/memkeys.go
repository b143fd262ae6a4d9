package limit

import (
	"math"
	"sync/atomic"
)

// sampleSize is how many keys of a shard a new key looks at for keys back at
// rest, and EvictLRU for the one to evict.
const sampleSize = 8

// cleanupBatch is how many slots (or logs) Cleanup examines per hold of a
// shard's lock.
const cleanupBatch = 64

// admitKey makes room for one new key in sh, which requires sh.mu, and
// counts it. Past half of MaxKeys it drops the keys at rest among a sample
// of the shard; at MaxKeys it drops every key at rest of a shard that may
// hold one, the new key's first (makeRoom), so that no key that spent
// anything goes while a key at rest is held; only then does it evict (the
// key of a sample that spent least) or refuse. h, the new key's hash,
// places the samples. The key is counted by compare-and-swap below
// MaxKeys, so that keys admitted at once on other shards never take the
// store past it: room that another shard's key took first is made again.
func (m *Memory) admitKey(t *table, sh *shard, h uint64, now int64) error {
	if m.keys.Load() >= m.maxKeys/2 {
		m.cleanSample(t, sh, h, now)
	}
	for {
		if n := m.keys.Load(); n < m.maxKeys {
			if m.keys.CompareAndSwap(n, n+1) {
				return nil
			}
			continue
		}
		if m.makeRoom(t, sh, now) {
			continue
		}
		if m.whenFull == RefuseNewKeys || !m.evict(t, sh, h, now) {
			m.refused.Add(1)
			return ErrTooManyKeys
		}
	}
}

// lowerRest lowers the shard's rest bound to r, the rest time of the state
// just written to slot i (or, i < 0, to the rolling log of key); it
// requires sh.mu. Decisions without the lock need not call it: a decision
// only moves a key's rest time later. A key that rests before the rest
// queue's floor and is not in the queue (a new key, a refund) makes the
// queue incomplete, so that the next look for keys at rest sweeps.
func (t *table) lowerRest(sh *shard, r int64, i int, key string) {
	if r < sh.rest.Load() {
		sh.rest.Store(r)
		t.rest.lower(r)
	}
	if q := sh.rq; q != nil && !q.dirty && r < q.floor && !q.holds(i, key) {
		q.dirty = true
	}
}

// restQueueSize is how many keys a sweep remembers as the first to come to
// rest: a store at MaxKeys drops them as they do, one look each, and
// sweeps a shard again only once they are gone.
const restQueueSize = 16

// restQueue is what a sweep of a shard learnt: the keys that come to rest
// first, earliest first, and a floor before which no other key does. It
// is kept under the shard's lock.
type restQueue struct {
	e     []restEntry
	floor int64  // every key not in e rests at floor or later
	gen   uint32 // the slots' gen the indexes of e belong to
	dirty bool   // a key not in e may rest before floor: sweep again
}

// restEntry is a key and a time before which it is not at rest: slot i, or
// the rolling log of key.
type restEntry struct {
	at  int64
	i   int
	key string
}

func (q *restQueue) holds(i int, key string) bool {
	for k := range q.e {
		if i >= 0 && q.e[k].i == i || i < 0 && q.e[k].key == key {
			return true
		}
	}
	return false
}

// add puts e in q if it comes before the floor, keeping q sorted; when q
// is full the later of e and the last entry stays out, and the floor comes
// down to it.
func (q *restQueue) add(e restEntry) {
	if e.at >= q.floor {
		return
	}
	if len(q.e) == restQueueSize {
		last := q.e[len(q.e)-1].at
		if e.at >= last {
			q.floor = e.at
			return
		}
		q.floor = last
		q.e = q.e[:len(q.e)-1]
	}
	k := len(q.e)
	q.e = append(q.e, e)
	for ; k > 0 && q.e[k-1].at > e.at; k-- {
		q.e[k] = q.e[k-1]
	}
	q.e[k] = e
}

// bound returns the earliest time a key of q's shard may be at rest.
func (q *restQueue) bound() int64 {
	if len(q.e) > 0 {
		return min(q.e[0].at, q.floor)
	}
	return q.floor
}

// makeRoom drops keys at rest, from sh and then from any shard whose bound
// says it may hold one, until the store is below MaxKeys; it requires
// sh.mu and reports whether there is room. Other shards are only tried
// (TryLock): sh.mu is held, and waiting for another shard's lock could
// deadlock with an AllowAll that holds it.
func (m *Memory) makeRoom(t *table, sh *shard, now int64) bool {
	if sh.rest.Load() <= now {
		m.dropResting(t, sh, now)
		if m.keys.Load() < m.maxKeys {
			return true
		}
	}
	if m.rest.at.Load() > now {
		return false
	}
	ver, at := m.rest.ver.Load(), m.rest.at.Load()
	least := int64(math.MaxInt64)
	for _, ot := range *m.tables.Load() {
		for i := range ot.shards {
			o := &ot.shards[i]
			if o.rest.Load() <= now && o != sh && o.mu.TryLock() {
				m.dropResting(ot, o, now)
				o.mu.Unlock()
				if m.keys.Load() < m.maxKeys {
					return true
				}
			}
			least = min(least, o.rest.Load())
		}
	}
	if m.rest.ver.Load() == ver {
		m.rest.at.CompareAndSwap(at, least)
	}
	return false
}

// dropResting drops the keys of sh at rest at now: those its rest queue
// names, when the queue can tell, else every one, by a sweep. It requires
// sh.mu.
func (m *Memory) dropResting(t *table, sh *shard, now int64) {
	q := sh.rq
	if q == nil || q.dirty || sh.logs == nil && q.gen != sh.t.gen {
		m.sweep(t, sh, now)
		return
	}
	for len(q.e) > 0 && q.e[0].at <= now {
		e := q.e[0]
		q.e = q.e[:copy(q.e, q.e[1:])]
		if r, ok := m.dropIfResting(t, sh, e, now); ok {
			q.add(restEntry{at: r, i: e.i, key: e.key})
		}
	}
	if q.floor <= now {
		m.sweep(t, sh, now)
		return
	}
	sh.rest.Store(q.bound())
}

// dropIfResting drops the key of e if it is at rest at now; otherwise it
// returns the key's rest time and true, when the key is still held and
// readable. It requires sh.mu.
func (m *Memory) dropIfResting(t *table, sh *shard, e restEntry, now int64) (int64, bool) {
	if sh.logs != nil {
		l := sh.logs[e.key]
		if l == nil {
			return 0, false
		}
		if l.atRest(now, t.pr.w) {
			delete(sh.logs, e.key)
			m.dropped(&m.cleaned)
			return 0, false
		}
		return l.restAt(t.pr.w), true
	}
	if m.dropIfAtRest(t, sh, e.i, now) || !sh.t.live(e.i) {
		return 0, false
	}
	// A frozen slot's taker holds this lock and will put its state, which
	// lowers the bound as it must.
	s, _, ok := t.peek(sh, e.i)
	return t.pr.restAt(s), ok
}

// sweep drops every key at rest of sh and fills its rest queue with the
// keys left that come to rest first; it requires sh.mu. A sweep reads the
// whole shard, so a store at MaxKeys sweeps a shard only once the keys of
// its queue are gone.
func (m *Memory) sweep(t *table, sh *shard, now int64) {
	q := sh.rq
	if q == nil {
		q = &restQueue{e: make([]restEntry, 0, restQueueSize)}
		sh.rq = q
	}
	q.e, q.floor, q.gen, q.dirty = q.e[:0], math.MaxInt64, sh.t.gen, false
	if sh.logs != nil {
		for k, l := range sh.logs {
			if l.atRest(now, t.pr.w) {
				delete(sh.logs, k)
				m.dropped(&m.cleaned)
			} else {
				q.add(restEntry{at: l.restAt(t.pr.w), i: -1, key: k})
			}
		}
	} else {
		for i := range sh.t.s {
			if !sh.t.live(i) || m.dropIfAtRest(t, sh, i, now) {
				continue
			}
			// A frozen slot's taker holds this lock and will put its
			// state, which lowers the bound again.
			if s, _, ok := t.peek(sh, i); ok {
				q.add(restEntry{at: t.pr.restAt(s), i: i})
			}
		}
	}
	sh.rest.Store(q.bound())
}

// cleanSample drops the keys at rest among a sample of sh; it requires sh.mu.
func (m *Memory) cleanSample(t *table, sh *shard, h uint64, now int64) {
	if sh.logs != nil {
		n := 0
		for k, l := range sh.logs { // a Go map's range starts at a random place
			if n++; n > sampleSize {
				break
			}
			if l.atRest(now, t.pr.w) {
				delete(sh.logs, k)
				m.dropped(&m.cleaned)
			}
		}
		return
	}
	if len(sh.t.s) == 0 {
		return
	}
	mask := len(sh.t.s) - 1
	i := int(h>>32) & mask
	for k := 0; k < sampleSize; k++ {
		m.dropIfAtRest(t, sh, i, now)
		i = (i + 1) & mask
	}
}

// dropIfAtRest drops the key of slot i of sh if it holds one at rest (and
// not frozen); it requires sh.mu and reports whether it dropped it.
func (m *Memory) dropIfAtRest(t *table, sh *shard, i int, now int64) bool {
	if !sh.t.live(i) {
		return false
	}
	s, w, ok := t.peek(sh, i)
	// A decision without the lock may change the word between peek and
	// freeze; freeze then fails and the key stays.
	if !ok || !t.pr.atRest(s, now) || !t.freeze(sh, i, w) {
		return false
	}
	sh.t.remove(i)
	m.dropped(&m.cleaned)
	return true
}

// candidate is the key a lossy eviction would drop, so far: in slot i of
// sh, or the rolling log of key.
type candidate struct {
	sh    *shard
	i     int
	key   string
	spent int64 // what evicting it forgives, in the policy's units
	used  int64 // when it was used last: seconds (slots) or µs (logs)
}

// better reports whether a key that spent sp, used last at u, is a better
// victim than c: it spent less, or as little and was used longer ago.
func (c *candidate) better(sp, u int64) bool {
	return c.sh == nil || sp < c.spent || sp == c.spent && u < c.used
}

// evict drops one key to make room for a new key of sh, which requires
// sh.mu: of a sample of 8 keys of t (sh's, then, when sh holds fewer, the
// next shards' that can be locked at once), the key that spent least, the
// least recently used of those that spent as little; its eviction forgives
// least. When t holds no key it could lock, a key of another table goes.
// It reports whether it dropped one.
func (m *Memory) evict(t *table, sh *shard, h uint64, now int64) bool {
	var c candidate
	seen := m.sample(t, sh, h, now, &c)
	start := int((h >> 48) & t.mask)
	for k := 1; seen < sampleSize && k < len(t.shards); k++ {
		o := &t.shards[(start+k)&int(t.mask)]
		if o == sh || !o.mu.TryLock() {
			continue
		}
		prev := c.sh
		seen += m.sample(t, o, h, now, &c)
		if c.sh != o {
			o.mu.Unlock()
		} else if prev != nil && prev != sh {
			prev.mu.Unlock()
		}
	}
	if c.sh != nil {
		m.drop(t, &c)
		if c.sh != sh {
			c.sh.mu.Unlock()
		}
		return true
	}
	for _, ot := range *m.tables.Load() {
		for i := range ot.shards {
			o := &ot.shards[i]
			if ot == t || !o.mu.TryLock() {
				continue
			}
			m.sample(ot, o, h, now, &c)
			if c.sh != nil {
				m.drop(ot, &c)
			}
			o.mu.Unlock()
			if c.sh != nil {
				return true
			}
		}
	}
	return false
}

// sample looks at up to 8 keys of sh, from a place set by h, and makes the
// best victim among them and c's the candidate c; it requires sh.mu and
// returns how many keys it looked at. Frozen slots (keys of the AllowAll
// being decided) are passed over.
func (m *Memory) sample(t *table, sh *shard, h uint64, now int64, c *candidate) int {
	seen := 0
	if sh.logs != nil {
		for k, l := range sh.logs { // a Go map's range starts at a random place
			if sp := l.spent(now, t.pr.w); c.better(sp, l.last) {
				*c = candidate{sh: sh, key: k, spent: sp, used: l.last}
			}
			if seen++; seen == sampleSize {
				break
			}
		}
		return seen
	}
	if len(sh.t.s) == 0 {
		return 0
	}
	mask := len(sh.t.s) - 1
	for i, looked := int(h>>32)&mask, 0; seen < sampleSize && looked < sh.t.n; i = (i + 1) & mask {
		if !sh.t.live(i) {
			continue
		}
		looked++
		s, _, ok := t.peek(sh, i)
		if !ok {
			continue
		}
		if sp, u := t.pr.spent(s, now), int64(atomic.LoadUint32(&sh.t.s[i].used)); c.better(sp, u) {
			*c = candidate{sh: sh, i: i, spent: sp, used: u}
		}
		seen++
	}
	return seen
}

// drop evicts c, a key of table t; it requires c.sh.mu. A decision without
// the lock may spend on the key between sample and drop: it goes all the
// same, a lossy eviction either way.
func (m *Memory) drop(t *table, c *candidate) {
	if c.sh.logs != nil {
		delete(c.sh.logs, c.key)
	} else {
		t.take(c.sh, c.i)
		c.sh.t.remove(c.i)
	}
	m.dropped(m.lossCounter(c.spent))
}

// lossCounter returns the counter of a key dropped having spent sp: Evicted
// when it had spent anything, Cleaned when it was at rest.
func (m *Memory) lossCounter(sp int64) *atomic.Int64 {
	if sp > 0 {
		return &m.evicted
	}
	return &m.cleaned
}

func (m *Memory) dropped(counter interface{ Add(int64) int64 }) {
	counter.Add(1)
	m.keys.Add(-1)
}

// Cleanup drops every key back at rest, which changes no decision, and
// returns how many it dropped. It walks one shard at a time and releases the
// shard's lock after every 64 slots, so decisions wait at most that long.
// It is safe to call concurrently with decisions, for example on a ticker.
func (m *Memory) Cleanup() int {
	dropped := 0
	for _, t := range *m.tables.Load() {
		for i := range t.shards {
			if t.pr.alg == algRolling {
				dropped += m.cleanLogs(t, &t.shards[i])
			} else {
				dropped += m.cleanSlots(t, &t.shards[i])
			}
		}
	}
	return dropped
}

// cleanSlots sweeps sh's slot table in batches of 64 slots, each under the
// lock. A key moved by a resize, or inserted, between two batches may be
// missed until the next sweep.
func (m *Memory) cleanSlots(t *table, sh *shard) int {
	dropped := 0
	for start := 0; ; start += cleanupBatch {
		sh.mu.Lock()
		if start >= len(sh.t.s) {
			// The sweep is over: give back what a mostly empty table holds.
			// Resizing moves the few keys left, so it is quick.
			sh.t.shrink()
			sh.mu.Unlock()
			return dropped
		}
		now := m.now()
		for i := start; i < min(start+cleanupBatch, len(sh.t.s)); i++ {
			if m.dropIfAtRest(t, sh, i, now) {
				dropped++
			}
		}
		sh.mu.Unlock()
	}
}

// cleanLogs sweeps sh's rolling logs. Go maps may be changed while they
// are ranged over, and the range only advances while sh.mu is held, so
// other goroutines may decide between batches; keys they add may be missed
// until the next sweep.
func (m *Memory) cleanLogs(t *table, sh *shard) int {
	dropped, n := 0, 0
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := m.now()
	for k, l := range sh.logs {
		if l.atRest(now, t.pr.w) {
			delete(sh.logs, k)
			m.dropped(&m.cleaned)
			dropped++
		}
		if n++; n%cleanupBatch == 0 {
			sh.mu.Unlock()
			sh.mu.Lock()
			now = m.now()
		}
	}
	// A Go map never gives memory back: copy a mostly empty one.
	if len(sh.logs)*8 <= sh.peak {
		fresh := make(map[string]*rollingLog, len(sh.logs))
		for k, l := range sh.logs {
			fresh[k] = l
		}
		sh.logs, sh.peak = fresh, len(fresh)
	}
	return dropped
}

// Stats returns the store's counters.
func (m *Memory) Stats() MemoryStats {
	return MemoryStats{Keys: m.keys.Load(), Cleaned: m.cleaned.Load(),
		Evicted: m.evicted.Load(), Refused: m.refused.Load()}
}
