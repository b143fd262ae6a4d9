package redislimit

import (
	"runtime"
	"sync/atomic"
	"unsafe"
)

// coldTable is a shard's cold leases by Redis key: open addressing with
// linear probing over slots of 16 bytes (the key's hash and its lease),
// four to a cache line. A decision finds its lease in one slot's line and
// then loads the lease's own lines, whose addresses depend on nothing but
// the slot, where a Go map compares the key before it yields the lease
// (DESIGN-allowances.md section 10).
//
// The shard's mutex guards its writers; lookups (get) may take none. A
// slot's lease is stored before its tag, and an array that is resized is
// replaced, never rewritten, so that a lookup finds a lease that is, or
// was, the key's. A lease leaves the table only once it is ended (its
// remainder taken: coldLease.end), so a spend from one that has left
// fails and the decision goes on under the lock. A lookup that misses a
// lease sends its decision there as well.
//
// The array is kept as its first slot and its length, on the shard's
// line that every decision loads anyway, so that a lookup loads no slice
// header of its own before the slot: one dependent load fewer where the
// slot is not in the caches. A sequence count, odd while the two change,
// lets a lookup read them as a pair.
type coldTable struct {
	seq   atomic.Uint64            // odd while first and mask change
	first atomic.Pointer[coldSlot] // the array's first slot, or nil
	mask  atomic.Uint64            // the array's length (a power of two) less one
	n     int                      // leases held
	tombs int                      // removed slots not yet reused
}

// coldSlot holds a lease and its key's hash, made odd (tag): a tag of 0 is
// an empty slot, a tag without a lease a removed one (a tombstone, which
// probing passes over).
type coldSlot struct {
	tag atomic.Uint64
	c   atomic.Pointer[coldLease]
}

// coldTableMin is the smallest array a table with leases holds.
const coldTableMin = 16

func coldTag(h uint64) uint64 { return h | 1 }

// slots is the table's array, nil when empty. It needs no lock: a
// lookup that meets a resize publishing reads again, after yielding its
// processor, in case the writer's goroutine waits for one.
func (t *coldTable) slots() []coldSlot {
	for {
		v := t.seq.Load()
		if v&1 != 0 {
			runtime.Gosched()
			continue
		}
		first, mask := t.first.Load(), t.mask.Load()
		if t.seq.Load() == v {
			if first == nil {
				return nil
			}
			return unsafe.Slice(first, mask+1)
		}
	}
}

// setSlots makes s the table's array (the shard's lock held).
func (t *coldTable) setSlots(s []coldSlot) {
	t.seq.Add(1)
	if len(s) == 0 {
		t.first.Store(nil)
		t.mask.Store(0)
	} else {
		t.first.Store(&s[0])
		t.mask.Store(uint64(len(s) - 1))
	}
	t.seq.Add(1)
}

// get returns rk's lease (h its hash), or nil. Called without the shard's
// lock, it may return a lease that has just left the table, or miss one
// just put.
func (t *coldTable) get(h uint64, rk string) *coldLease {
	s := t.slots()
	_, c := findCold(s, coldTag(h), rk)
	return c
}

// findCold returns the slot of s holding rk's lease (tag its hash's), and the
// lease, or -1 and nil.
func findCold(s []coldSlot, tag uint64, rk string) (int, *coldLease) {
	if len(s) == 0 {
		return -1, nil
	}
	mask := len(s) - 1
	for i := int(tag>>1) & mask; ; i = (i + 1) & mask {
		sl := &s[i]
		switch sl.tag.Load() {
		case 0:
			return -1, nil
		case tag:
			if c := sl.c.Load(); c != nil && c.is(rk) {
				return i, c
			}
		}
	}
}

// put adds c, whose key (hash h) has no lease in t.
func (t *coldTable) put(h uint64, c *coldLease) {
	s := t.slots()
	if (t.n+t.tombs+1)*4 > len(s)*3 {
		s = t.resize(max(coldTableMin, 2*(t.n+1)))
	}
	tag := coldTag(h)
	mask := len(s) - 1
	for i := int(tag>>1) & mask; ; i = (i + 1) & mask {
		sl := &s[i]
		if sl.c.Load() == nil {
			if sl.tag.Load() != 0 {
				t.tombs--
			}
			sl.c.Store(c)
			sl.tag.Store(tag)
			t.n++
			return
		}
	}
}

// del removes rk's lease (h its hash), if any.
func (t *coldTable) del(h uint64, rk string) {
	s := t.slots()
	if i, _ := findCold(s, coldTag(h), rk); i >= 0 {
		t.delAt(s, i)
		t.shrink()
	}
}

func (t *coldTable) delAt(s []coldSlot, i int) {
	s[i].c.Store(nil)
	t.n--
	t.tombs++
}

// shrink gives the array back when few of its slots hold leases, so that
// memory follows the leases held rather than the most ever held.
func (t *coldTable) shrink() {
	switch n := len(t.slots()); {
	case t.n == 0:
		t.setSlots(nil)
		t.tombs = 0
	case n > coldTableMin && t.n*8 < n:
		t.resize(2 * t.n)
	}
}

// resize moves the leases into a new array of at least n slots, a power
// of two, which drops the tombstones, and returns it.
func (t *coldTable) resize(n int) []coldSlot {
	size := coldTableMin
	for size < n {
		size *= 2
	}
	old := t.slots()
	s := make([]coldSlot, size)
	t.n, t.tombs = 0, 0
	mask := size - 1
	for j := range old {
		c := old[j].c.Load()
		if c == nil {
			continue
		}
		tag := old[j].tag.Load()
		for i := int(tag>>1) & mask; ; i = (i + 1) & mask {
			if s[i].tag.Load() == 0 {
				s[i].c.Store(c)
				s[i].tag.Store(tag)
				t.n++
				break
			}
		}
	}
	t.setSlots(s)
	return s
}

// each calls f with every lease, removing those for which it returns true.
func (t *coldTable) each(f func(c *coldLease) (remove bool)) {
	s := t.slots()
	removed := false
	for i := range s {
		if c := s[i].c.Load(); c != nil && f(c) {
			t.delAt(s, i)
			removed = true
		}
	}
	if removed {
		t.shrink()
	}
}
