package limit

import (
	"math"
	"strings"
	"sync/atomic"
)

// slots is the table of one shard: open addressing with linear probing, so
// that a decision on a key costs one hash (the one that also picks the
// shard) and one probe sequence, updates its slot in place, and a sweep can
// walk the table in short batches by index.
//
// Every method requires the shard's lock, but decisions on the token bucket
// and GCRA also read the table without it (see packed.go), through the view
// the table publishes. For them a slot, once its tag is published, never
// changes key or moves: a removed key leaves a tombstone (which probing
// passes over) until the table is copied into a new array, which drops the
// tombstones. Before a slot is removed or copied its word a is frozen
// (swapped for frozen), so that a decision still holding the slot fails its
// compare-and-swap and takes the lock instead. The tag, a and used are read
// and written atomically; the key is written before its tag is published.
type slots struct {
	s     []slot  // a power of two long, or empty
	bc    []int64 // each slot's second word, beside s: see slot
	n     int     // keys held
	tombs int     // tombstones
	base  int64   // µs: the time packed slots count from (see packed.go)
	gen   uint32  // resizes so far: an index is valid while gen stays
	v     atomic.Pointer[view]
}

// view is what decisions without the lock read of a table: its slots and
// base, published together whenever either changes.
type view struct {
	s    []slot
	base int64
}

// slot is one key's state in 32 bytes, and a second word, bc, in the
// table's parallel array. The sliding window's two counts share bc, 32
// bits each (a count is at most twice the largest limit, 2^31; see params). The token bucket and
// GCRA keep their state packed in a alone when it fits (see packed.go), so
// that a decision on them reads one slot of 32 bytes. The arrays of large
// tables (1,024 slots and more, where keys are many and cache misses
// matter) are allocated as whole pages, so none of their slots straddles
// two cache lines and a probe of the next slot often stays in the same
// line; smaller arrays follow the allocator's 8-byte header.
type slot struct {
	tag  uint32 // bits of the key's hash, odd; 0 marks an empty slot, tomb a removed one
	used uint32 // seconds since the store started: EvictLRU's tie-break
	key  string
	a    int64
}

// tomb is the tag of a removed slot (tags of keys are odd).
const tomb = 2

// frozen is the word a of a slot being decided under the shard's lock,
// removed, or copied into a new array. No packed state is negative.
const frozen = math.MinInt64

// hashTag returns the tag of hash h: its low 32 bits made odd, so never 0.
// The shard is picked by the high bits of h, and the home slot by the
// tag's other bits (home), so that moving a slot needs no hash.
func hashTag(h uint64) uint32 { return uint32(h) | 1 }

func home(tag uint32, mask int) int { return int(tag>>1) & mask }

// find returns the index of key's slot in s, or -1. It needs no lock.
func find(s []slot, h uint64, key string) int {
	if len(s) == 0 {
		return -1
	}
	mask := len(s) - 1
	tag := hashTag(h)
	for i := home(tag, mask); ; i = (i + 1) & mask {
		sl := &s[i]
		switch atomic.LoadUint32(&sl.tag) {
		case 0:
			return -1
		case tag:
			if sl.key == key {
				return i
			}
		}
	}
}

// find returns the index of key's slot, or -1.
func (t *slots) find(h uint64, key string) int { return find(t.s, h, key) }

// live reports whether slot i holds a key.
func (t *slots) live(i int) bool { return t.s[i].tag&1 != 0 }

// insert adds key, which must be absent, and returns its index. The slot's
// word is frozen: the caller stores the key's state. The slot holds a copy
// of key, so that a key cut from a larger string (a request's header)
// does not keep that string alive.
func (t *slots) insert(h uint64, key string) int {
	// Up to 7/8 full, tombstones included: linear probing then still
	// finds a key in a few probes on average, and a table holds 46 to 91
	// bytes per key (40 per slot, the table 7/16 to 7/8 full). A table
	// full of tombstones is copied at its size.
	if (t.n+t.tombs+1)*8 > len(t.s)*7 {
		size := max(8, len(t.s))
		if (t.n+1)*16 > size*7 {
			size *= 2
		}
		t.resize(size)
	}
	mask := len(t.s) - 1
	tag := hashTag(h)
	i := home(tag, mask)
	for t.s[i].tag != 0 {
		i = (i + 1) & mask
	}
	sl := &t.s[i]
	sl.key, t.bc[i] = strings.Clone(key), 0
	atomic.StoreUint32(&sl.used, 0)
	atomic.StoreInt64(&sl.a, frozen)
	atomic.StoreUint32(&sl.tag, tag)
	t.n++
	return i
}

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

// resize moves the keys into a new array of size slots, a power of two (or
// 0 when there are none), and publishes it. Every slot of the old array is
// frozen, so that no decision changes it any more.
func (t *slots) resize(size int) {
	old, oldbc := t.s, t.bc
	t.s, t.bc, t.tombs = nil, nil, 0
	t.gen++
	if size > 0 {
		t.s, t.bc = make([]slot, size), make([]int64, size)
	}
	mask := len(t.s) - 1
	for k := range old {
		o := &old[k]
		if o.tag&1 == 0 {
			continue
		}
		i := home(o.tag, mask)
		for t.s[i].tag != 0 {
			i = (i + 1) & mask
		}
		t.s[i] = slot{tag: o.tag, used: atomic.LoadUint32(&o.used), key: o.key,
			a: atomic.SwapInt64(&o.a, frozen)}
		t.bc[i] = oldbc[k]
	}
	t.publish()
}

// publish makes the array and base visible to decisions without the lock.
func (t *slots) publish() {
	if t.s == nil {
		t.v.Store(nil)
		return
	}
	t.v.Store(&view{s: t.s, base: t.base})
}

// remove drops the key of slot i, whose word the caller froze, leaving a
// tombstone.
func (t *slots) remove(i int) {
	atomic.StoreUint32(&t.s[i].tag, tomb)
	t.n--
	t.tombs++
}

// state returns the state of slot i under alg (an algorithm without a
// packed form: the fixed and sliding windows).
func (t *slots) state(i int, alg alg) state {
	a, bc := atomic.LoadInt64(&t.s[i].a), t.bc[i]
	if alg == algSliding {
		// Each count is at most twice the largest limit, 2^31: the
		// current one may set bc's sign bit, so it is shifted unsigned.
		return state{a: a, b: int64(uint64(bc) >> 32), c: bc & (1<<32 - 1)}
	}
	return state{a: a, b: bc}
}

// set stores s in slot i under alg, used at used.
func (t *slots) set(i int, alg alg, s state, used uint32) {
	t.bc[i] = s.b
	if alg == algSliding {
		t.bc[i] = s.b<<32 | s.c
	}
	sl := &t.s[i]
	atomic.StoreUint32(&sl.used, used)
	atomic.StoreInt64(&sl.a, s.a)
}
