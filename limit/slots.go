package limit

// slots is the table of one shard: open addressing with linear probing and
// backward-shift deletion, so that a decision on a key costs one hash (the
// one that also picks the shard) and one probe sequence, updates its slot
// in place, and a sweep can walk the table in short batches by index.
// Every method requires the shard's lock.
type slots struct {
	s []slot // a power of two long, or empty
	n int    // slots in use
}

// slot is one key's state in 40 bytes. The sliding window's two counts
// share bc (limits of the sliding window fit in 31 bits; see params).
type slot struct {
	tag  uint32 // bits of the key's hash, never 0; 0 marks an empty slot
	used uint32 // seconds since the store started, for EvictLRU
	key  string
	a    int64
	bc   int64
}

// hashTag returns the tag of hash h: its low 32 bits made odd, so never 0.
// The shard is picked by the high bits of h, and the home slot by the
// tag's other bits (home), so that moving a slot needs no hash.
func hashTag(h uint64) uint32 { return uint32(h) | 1 }

func home(tag uint32, mask int) int { return int(tag>>1) & mask }

// find returns the index of key's slot, or -1.
func (t *slots) find(h uint64, key string) int {
	if t.n == 0 {
		return -1
	}
	mask := len(t.s) - 1
	tag := hashTag(h)
	for i := home(tag, mask); ; i = (i + 1) & mask {
		sl := &t.s[i]
		if sl.tag == 0 {
			return -1
		}
		if sl.tag == tag && sl.key == key {
			return i
		}
	}
}

// insert adds key, which must be absent, and returns its index.
func (t *slots) insert(h uint64, key string) int {
	// Up to 7/8 full: linear probing then still finds a key in a few
	// probes on average, and a table holds 40 to 80 bytes per key.
	if (t.n+1)*8 > len(t.s)*7 {
		t.grow()
	}
	mask := len(t.s) - 1
	tag := hashTag(h)
	i := home(tag, mask)
	for t.s[i].tag != 0 {
		i = (i + 1) & mask
	}
	t.s[i] = slot{tag: tag, key: key}
	t.n++
	return i
}

// grow doubles the table.
func (t *slots) grow() { t.resize(max(8, 2*len(t.s))) }

// shrink gives back the memory of a table mostly emptied by a sweep: one
// used to an eighth or less is halved until it is at least a quarter full
// (an empty one is dropped). It reports whether it resized.
func (t *slots) shrink() bool {
	if len(t.s) == 0 || t.n*8 > len(t.s) {
		return false
	}
	size := len(t.s)
	for size > 8 && t.n*4 < size {
		size /= 2
	}
	if t.n == 0 {
		size = 0
	}
	t.resize(size)
	return true
}

// resize moves the slots into a table of size slots, a power of two (or 0
// when there are none).
func (t *slots) resize(size int) {
	old := t.s
	t.s = nil
	if size == 0 {
		return
	}
	t.s = make([]slot, size)
	mask := len(t.s) - 1
	for k := range old {
		if old[k].tag == 0 {
			continue
		}
		i := home(old[k].tag, mask)
		for t.s[i].tag != 0 {
			i = (i + 1) & mask
		}
		t.s[i] = old[k]
	}
}

// remove empties slot i and shifts back the slots after it that probing
// would otherwise no longer reach. A slot after i may move into i.
func (t *slots) remove(i int) {
	mask := len(t.s) - 1
	j := i
	for {
		j = (j + 1) & mask
		if t.s[j].tag == 0 {
			break
		}
		h := home(t.s[j].tag, mask)
		// Move j back into i when its home is not cyclically in (i, j].
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			t.s[i] = t.s[j]
			i = j
		}
	}
	t.s[i] = slot{}
	t.n--
}

// state returns the slot's state under alg.
func (sl *slot) state(alg alg) state {
	if alg == algSliding {
		return state{a: sl.a, b: sl.bc >> 32, c: sl.bc & (1<<32 - 1)}
	}
	return state{a: sl.a, b: sl.bc}
}

// set stores s under alg, used at used.
func (sl *slot) set(alg alg, s state, used uint32) {
	sl.a, sl.bc, sl.used = s.a, s.b, used
	if alg == algSliding {
		sl.bc = s.b<<32 | s.c
	}
}
