package limit

import (
	"math"
	"math/bits"
	"sync/atomic"
)

// The token bucket and the GCRA keep a key's state in one 64-bit word, so
// that a decision on a key already held takes no lock at all: it finds the
// key in the shard's published view (see slots) and replaces the word with
// a compare-and-swap, retried until it lands. Concurrent decisions on one
// key then never wait for each other, never fail, and stay exact, since
// each one decides on the word it swaps out. A denied decision only reads.
//
// The word holds the state relative to the table's base time (slots.base,
// µs), exactly:
//
//	gcra          (TAT - base) * n + fraction
//	token bucket  (time - base) << dbits | debt   (debt <= 2 * cap < 1<<dbits)
//
// with bc 0; it is never negative. A state that does not fit (the
// application's clock went back before the base, or far ahead) is kept
// unpacked instead, its value complemented so that the word is negative,
// and bc its time minus the base, which is then never 0:
//
//	gcra          a: ^fraction, bc: TAT - base
//	token bucket  a: ^debt,     bc: time - base
//
// A negative word (unpacked, or frozen: see slots) sends a decision to the
// shard's lock, as do new keys and every other algorithm. Whatever holds
// the lock and changes a packed slot first freezes it (take, freeze) and
// stores the new word last (put, keep), so a word that is not negative is
// always a packed state. When a token bucket's time outgrows its word
// (after 2^(63-dbits) µs, from about 20 minutes to many years depending on
// the policy), the shard is rebased: its slots are copied, packed relative
// to a later base. A slot that no longer fits then is unpacked, which keeps
// it exact; its next decision packs it again.

// packing sets the packing parameters of a table with params pr.
func (t *table) packing() {
	switch t.pr.alg {
	case algGCRA:
		t.packs = true
		t.maxDiff = (math.MaxInt64 - (t.pr.n - 1)) / t.pr.n
	case algTokenBucket:
		t.packs = true
		t.dbits = uint(bits.Len64(uint64(2 * t.pr.cap)))
		t.maxDiff = 1<<(63-t.dbits) - 1
	}
}

// pack returns s as the word of a packed slot under base, and whether it
// fits.
func (t *table) pack(base int64, s state) (int64, bool) {
	if t.pr.alg == algGCRA {
		diff := s.a - base
		if diff < 0 || diff > t.maxDiff || s.b < 0 || s.b >= t.pr.n {
			return 0, false
		}
		if t.pr.n == 1 {
			return diff, true
		}
		return diff*t.pr.n + s.b, true
	}
	diff := s.b - base
	if diff < 0 || diff > t.maxDiff || s.a < 0 || s.a >= 1<<t.dbits {
		return 0, false
	}
	return diff<<t.dbits | s.a, true
}

// unpack returns the state of the word w of a packed slot under base.
func (t *table) unpack(base, w int64) state {
	if t.pr.alg == algGCRA {
		if t.pr.n == 1 {
			return state{a: base + w}
		}
		return state{a: base + w/t.pr.n, b: w % t.pr.n}
	}
	return state{a: w & (1<<t.dbits - 1), b: base + w>>t.dbits}
}

// decode returns the state of a slot whose word is a and bc is bc, under
// base. a must not be frozen.
func (t *table) decode(base, a, bc int64) state {
	if bc == 0 {
		return t.unpack(base, a)
	}
	if t.pr.alg == algGCRA {
		return state{a: base + bc, b: ^a}
	}
	return state{a: ^a, b: base + bc}
}

// encode returns the word and bc of s under base: packed if it fits,
// otherwise unpacked, with the value in a complemented (so negative) and
// bc the time minus base, never 0 (a difference of 0 fits).
func (t *table) encode(base int64, s state) (a, bc int64) {
	// decide and settle only produce values in range: this changes
	// nothing but keeps a misuse from breaking the encoding.
	if t.pr.alg == algGCRA {
		s.b = min(max(s.b, 0), t.pr.n-1)
	} else {
		s.a = min(max(s.a, 0), 1<<t.dbits-1)
	}
	if w, ok := t.pack(base, s); ok {
		return w, 0
	}
	if t.pr.alg == algGCRA {
		return ^s.b, s.a - base
	}
	return ^s.a, s.b - base
}

// take returns the state of slot i of sh and, for a table of packed
// states, freezes the slot until put or keep: decisions without the lock
// then leave it alone. It requires sh.mu.
func (t *table) take(sh *shard, i int) state {
	if !t.packs {
		return sh.t.state(i, t.pr.alg)
	}
	return t.decode(sh.t.base, atomic.SwapInt64(&sh.t.s[i].a, frozen), sh.t.bc[i])
}

// peek returns the state of slot i of sh and its word, without freezing
// it; ok is false when the slot is frozen. It requires sh.mu.
func (t *table) peek(sh *shard, i int) (s state, w int64, ok bool) {
	if !t.packs {
		return sh.t.state(i, t.pr.alg), 0, true
	}
	w = atomic.LoadInt64(&sh.t.s[i].a)
	if w == frozen {
		return state{}, w, false
	}
	return t.decode(sh.t.base, w, sh.t.bc[i]), w, true
}

// freeze freezes slot i of sh if its word is still w, the word peek
// returned; it reports whether it did. It requires sh.mu.
func (t *table) freeze(sh *shard, i int, w int64) bool {
	return !t.packs || atomic.CompareAndSwapInt64(&sh.t.s[i].a, w, frozen)
}

// put stores s in slot i of sh, used at used, which unfreezes it; it
// requires sh.mu. A token bucket's state past its shard's range rebases
// the shard first, which keeps the slots' indexes.
func (t *table) put(sh *shard, i int, s state, used uint32) {
	t.lowerRest(sh, t.pr.restAt(s), i, "")
	if !t.packs {
		sh.t.set(i, t.pr.alg, s, used)
		return
	}
	if t.pr.alg == algTokenBucket && s.b-sh.t.base > t.maxDiff {
		t.rebase(sh, s.b)
	}
	sl := &sh.t.s[i]
	a, bc := t.encode(sh.t.base, s)
	sh.t.bc[i] = bc
	atomic.StoreUint32(&sl.used, used)
	atomic.StoreInt64(&sl.a, a)
}

// keep puts back s, the state take returned, in slot i of sh, leaving its
// time of use; it requires sh.mu.
func (t *table) keep(sh *shard, i int, s state) {
	t.put(sh, i, s, atomic.LoadUint32(&sh.t.s[i].used))
}

// rebase copies sh's slots into a new array, at the same indexes, packed
// relative to a base that puts now in the middle of the range; it requires
// sh.mu. Frozen slots stay frozen, for their taker to put.
func (t *table) rebase(sh *shard, now int64) {
	nb := now - t.maxDiff/2
	if nb <= sh.t.base {
		return
	}
	old := sh.t.s
	s, bc := make([]slot, len(old)), make([]int64, len(old))
	for i := range old {
		o := &old[i]
		if o.tag == 0 {
			continue
		}
		w := atomic.SwapInt64(&o.a, frozen)
		s[i] = slot{tag: o.tag, used: atomic.LoadUint32(&o.used), key: o.key, a: frozen}
		if o.tag&1 != 0 && w != frozen {
			s[i].a, bc[i] = t.encode(nb, t.decode(sh.t.base, w, sh.t.bc[i]))
		}
	}
	sh.t.s, sh.t.bc, sh.t.base = s, bc, nb
	sh.t.publish()
}

// allowPacked decides cost on key, a key of sh held packed, without the
// shard's lock: it reads the state word and replaces it with a
// compare-and-swap, retried until it lands (each retry decides again on
// the word the last one lost to). It reports false, having changed
// nothing, when the key is not held, is frozen or unpacked, or its new
// state does not fit: the caller then decides under the lock.
func (m *Memory) allowPacked(dec *Decision, t *table, sh *shard, h uint64, key string, now, cost int64) bool {
	v := sh.t.v.Load()
	if v == nil {
		return false
	}
	i := find(v.s, h, key)
	if i < 0 {
		return false
	}
	sl := &v.s[i]
	for {
		w := atomic.LoadInt64(&sl.a)
		if w < 0 {
			return false
		}
		s := t.unpack(v.base, w)
		ns := t.pr.decideRate(dec, s, now, cost)
		if ns == s {
			return true
		}
		nw, ok := t.pack(v.base, ns)
		if !ok {
			return false
		}
		if atomic.CompareAndSwapInt64(&sl.a, w, nw) {
			if u := m.used(now); atomic.LoadUint32(&sl.used) != u {
				atomic.StoreUint32(&sl.used, u)
			}
			return true
		}
	}
}
