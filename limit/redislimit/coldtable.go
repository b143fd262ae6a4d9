package redislimit

// coldTable is a shard's cold leases by Redis key: open addressing with
// linear probing over slots of 16 bytes (the key's hash and its lease),
// four to a cache line. A decision finds its lease in one slot's line and
// then loads the lease's own lines, whose addresses depend on nothing but
// the slot, where a Go map compares the key before it yields the lease
// (DESIGN-allowances.md section 10). The shard's mutex guards it.
type coldTable struct {
	s     []coldSlot // a power of two long, or empty
	n     int        // leases held
	tombs int        // removed slots not yet reused
}

// coldSlot holds a lease and its key's hash, made odd (tag): a tag of 0 is
// an empty slot, a tag without a lease a removed one (a tombstone, which
// probing passes over).
type coldSlot struct {
	tag uint64
	c   *coldLease
}

// coldTableMin is the smallest array a table with leases holds.
const coldTableMin = 16

func coldTag(h uint64) uint64 { return h | 1 }

// get returns rk's lease (h its hash), or nil.
func (t *coldTable) get(h uint64, rk string) *coldLease {
	if i := t.find(coldTag(h), rk); i >= 0 {
		return t.s[i].c
	}
	return nil
}

func (t *coldTable) find(tag uint64, rk string) int {
	if len(t.s) == 0 {
		return -1
	}
	mask := len(t.s) - 1
	for i := int(tag>>1) & mask; ; i = (i + 1) & mask {
		sl := &t.s[i]
		if sl.tag == 0 {
			return -1
		}
		if sl.tag == tag && sl.c != nil && sl.c.is(rk) {
			return i
		}
	}
}

// put adds c, whose key (hash h) has no lease in t.
func (t *coldTable) put(h uint64, c *coldLease) {
	if (t.n+t.tombs+1)*4 > len(t.s)*3 {
		t.resize(max(coldTableMin, 2*(t.n+1)))
	}
	tag := coldTag(h)
	mask := len(t.s) - 1
	for i := int(tag>>1) & mask; ; i = (i + 1) & mask {
		sl := &t.s[i]
		if sl.c == nil {
			if sl.tag != 0 {
				t.tombs--
			}
			sl.tag, sl.c = tag, c
			t.n++
			return
		}
	}
}

// del removes rk's lease (h its hash), if any.
func (t *coldTable) del(h uint64, rk string) {
	if i := t.find(coldTag(h), rk); i >= 0 {
		t.delAt(i)
		t.shrink()
	}
}

func (t *coldTable) delAt(i int) {
	t.s[i].c = nil
	t.n--
	t.tombs++
}

// shrink gives the array back when few of its slots hold leases, so that
// memory follows the leases held rather than the most ever held.
func (t *coldTable) shrink() {
	switch {
	case t.n == 0:
		*t = coldTable{}
	case len(t.s) > coldTableMin && t.n*8 < len(t.s):
		t.resize(2 * t.n)
	}
}

// resize moves the leases into an array of at least n slots, a power of
// two, which drops the tombstones.
func (t *coldTable) resize(n int) {
	size := coldTableMin
	for size < n {
		size *= 2
	}
	old := t.s
	t.s, t.n, t.tombs = make([]coldSlot, size), 0, 0
	mask := size - 1
	for _, sl := range old {
		if sl.c == nil {
			continue
		}
		for i := int(sl.tag>>1) & mask; ; i = (i + 1) & mask {
			if t.s[i].tag == 0 {
				t.s[i] = sl
				t.n++
				break
			}
		}
	}
}

// each calls f with every lease, removing those for which it returns true.
func (t *coldTable) each(f func(c *coldLease) (remove bool)) {
	removed := false
	for i := range t.s {
		if c := t.s[i].c; c != nil && f(c) {
			t.delAt(i)
			removed = true
		}
	}
	if removed {
		t.shrink()
	}
}
