package limit

// sampleSize is how many keys of a shard a new key looks at for keys back at
// rest, and EvictLRU for the least recently used.
const sampleSize = 8

// cleanupBatch is how many keys Cleanup examines per hold of a shard's lock.
const cleanupBatch = 64

// admitKey makes room for one new key in sh, which requires sh.mu: it drops
// a sample of the shard's keys at rest, then, when the store is still full,
// evicts or refuses. It counts the new key.
func (m *Memory) admitKey(t *table, sh *shard, now int64) error {
	if m.keys.Load() >= m.maxKeys/2 {
		m.cleanSample(t, sh, now)
	}
	if m.keys.Load() >= m.maxKeys {
		if m.whenFull == RefuseNewKeys || !m.evictSample(t, sh) {
			m.refused.Add(1)
			return ErrTooManyKeys
		}
	}
	m.keys.Add(1)
	return nil
}

// cleanSample drops the keys at rest among a sample of sh; it requires sh.mu.
// Ranging over a Go map starts at a random place, so repeated samples cover
// the shard.
func (m *Memory) cleanSample(t *table, sh *shard, now int64) {
	n := 0
	if sh.logs != nil {
		for k, l := range sh.logs {
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
	for k, e := range sh.m {
		if n++; n > sampleSize {
			break
		}
		if t.pr.atRest(e.s, now) {
			delete(sh.m, k)
			m.dropped(&m.cleaned)
		}
	}
}

// evictSample drops the least recently used of a sample of sh; it requires
// sh.mu and reports whether it dropped one.
func (m *Memory) evictSample(t *table, sh *shard) bool {
	var victim string
	oldest, n := int64(0), 0
	if sh.logs != nil {
		for k, l := range sh.logs {
			if n == 0 || l.last < oldest {
				victim, oldest = k, l.last
			}
			if n++; n == sampleSize {
				break
			}
		}
		if n > 0 {
			delete(sh.logs, victim)
		}
	} else {
		for k, e := range sh.m {
			if n == 0 || e.used < oldest {
				victim, oldest = k, e.used
			}
			if n++; n == sampleSize {
				break
			}
		}
		if n > 0 {
			delete(sh.m, victim)
		}
	}
	if n == 0 {
		return false
	}
	m.dropped(&m.evicted)
	return true
}

func (m *Memory) dropped(counter interface{ Add(int64) int64 }) {
	counter.Add(1)
	m.keys.Add(-1)
}

// Cleanup drops every key back at rest, which changes no decision, and
// returns how many it dropped. It walks one shard at a time and releases the
// shard's lock after every 64 keys, so decisions wait at most that long.
// It is safe to call concurrently with decisions, for example on a ticker.
func (m *Memory) Cleanup() int {
	dropped := 0
	for _, t := range *m.tables.Load() {
		for i := range t.shards {
			dropped += m.cleanShard(t, &t.shards[i])
		}
	}
	return dropped
}

// cleanShard sweeps sh. Go maps may be changed while they are ranged over,
// and the range only advances while sh.mu is held, so other goroutines may
// decide between batches; keys they add may be missed until the next sweep.
func (m *Memory) cleanShard(t *table, sh *shard) int {
	dropped, n := 0, 0
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := m.now()
	if sh.logs != nil {
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
		return dropped
	}
	for k, e := range sh.m {
		if t.pr.atRest(e.s, now) {
			delete(sh.m, k)
			m.dropped(&m.cleaned)
			dropped++
		}
		if n++; n%cleanupBatch == 0 {
			sh.mu.Unlock()
			sh.mu.Lock()
			now = m.now()
		}
	}
	return dropped
}

// Stats returns the store's counters.
func (m *Memory) Stats() MemoryStats {
	return MemoryStats{Keys: m.keys.Load(), Cleaned: m.cleaned.Load(),
		Evicted: m.evicted.Load(), Refused: m.refused.Load()}
}
