package limit

import "sync/atomic"

// sampleSize is how many keys of a shard a new key looks at for keys back at
// rest, and EvictLRU for the least recently used.
const sampleSize = 8

// cleanupBatch is how many slots (or logs) Cleanup examines per hold of a
// shard's lock.
const cleanupBatch = 64

// admitKey makes room for one new key in sh, which requires sh.mu: it drops
// a sample of the shard's keys at rest, then, when the store is still full,
// evicts or refuses. It counts the new key. h, the new key's hash, places
// the sample.
func (m *Memory) admitKey(t *table, sh *shard, h uint64, now int64) error {
	if m.keys.Load() >= m.maxKeys/2 {
		m.cleanSample(t, sh, h, now)
	}
	if m.keys.Load() >= m.maxKeys {
		if m.whenFull == RefuseNewKeys || !m.evictSample(t, sh, h) {
			m.refused.Add(1)
			return ErrTooManyKeys
		}
	}
	m.keys.Add(1)
	return nil
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

// evictSample drops the least recently used of a sample of sh; it requires
// sh.mu and reports whether it dropped one.
func (m *Memory) evictSample(t *table, sh *shard, h uint64) bool {
	if sh.logs != nil {
		var victim string
		oldest, n := int64(0), 0
		for k, l := range sh.logs {
			if n == 0 || l.last < oldest {
				victim, oldest = k, l.last
			}
			if n++; n == sampleSize {
				break
			}
		}
		if n == 0 {
			return false
		}
		delete(sh.logs, victim)
		m.dropped(&m.evicted)
		return true
	}
	mask := len(sh.t.s) - 1
	victim := -1
	var oldest uint32
	// Frozen slots (keys of the AllowAll being decided) are passed over.
	for i, seen, looked := int(h>>32)&mask, 0, 0; seen < sampleSize && looked < sh.t.n; i = (i + 1) & mask {
		if !sh.t.live(i) {
			continue
		}
		looked++
		sl := &sh.t.s[i]
		if t.packs && atomic.LoadInt64(&sl.a) == frozen {
			continue
		}
		if u := atomic.LoadUint32(&sl.used); victim < 0 || u < oldest {
			victim, oldest = i, u
		}
		seen++
	}
	if victim < 0 {
		return false
	}
	t.take(sh, victim)
	sh.t.remove(victim)
	m.dropped(&m.evicted)
	return true
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
