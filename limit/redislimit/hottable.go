package redislimit

// hotTable is a shard's allowances by Redis key, as a decision reads them
// without the shard's lock: open addressing over the keys' hashes, the
// one that picked the shard, so that a decision hashes its key once. It
// is built whole under the lock (see allowShard.publish) and never
// written after.
type hotTable struct {
	slots []hotSlot // a power of two long, at most half full
}

type hotSlot struct {
	h uint64
	r *allowance // nil: empty
}

// newHotTable returns a table of recs, or nil for none.
func newHotTable(recs map[string]*allowance) *hotTable {
	if len(recs) == 0 {
		return nil
	}
	n := 4
	for n < 2*len(recs) {
		n *= 2
	}
	t := &hotTable{slots: make([]hotSlot, n)}
	for _, r := range recs {
		for i := r.h & uint64(n-1); ; i = (i + 1) & uint64(n-1) {
			if t.slots[i].r == nil {
				t.slots[i] = hotSlot{h: r.h, r: r}
				break
			}
		}
	}
	return t
}

// get returns the allowance of rk (h its hash), or nil.
func (t *hotTable) get(h uint64, rk string) *allowance {
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		sl := &t.slots[i]
		if sl.r == nil {
			return nil
		}
		if sl.h == h && sl.r.rk == rk {
			return sl.r
		}
	}
}
