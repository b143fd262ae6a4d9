package limit

import (
	"hash/maphash"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
	"unsafe"
)

// TestSlotsAgainstMap runs random inserts, finds and removes on a slot
// table, with a small key space so that probe runs collide and wrap, and
// checks every answer against a Go map.
func TestSlotsAgainstMap(t *testing.T) {
	seed := maphash.MakeSeed()
	rng := rand.New(rand.NewPCG(3, 4))
	var tab slots
	ref := map[string]int64{}
	for step := 0; step < 200_000; step++ {
		key := strconv.Itoa(rng.IntN(300))
		h := maphash.String(seed, key)
		i := tab.find(h, key)
		want, ok := ref[key]
		if (i >= 0) != ok || ok && tab.s[i].a != want {
			t.Fatalf("step %d: find(%q) = %d, reference %v %v", step, key, i, want, ok)
		}
		switch {
		case ok && rng.IntN(2) == 0:
			tab.remove(i)
			delete(ref, key)
		case ok:
			tab.s[i].a++
			ref[key]++
		default:
			tab.s[tab.insert(h, key)].a = int64(step)
			ref[key] = int64(step)
		}
		if tab.n != len(ref) {
			t.Fatalf("step %d: %d slots used, %d keys", step, tab.n, len(ref))
		}
	}
}

func TestSlotsShrink(t *testing.T) {
	seed := maphash.MakeSeed()
	var tab slots
	for i := 0; i < 1000; i++ {
		k := strconv.Itoa(i)
		tab.insert(maphash.String(seed, k), k)
	}
	for i := 0; i < 990; i++ {
		k := strconv.Itoa(i)
		tab.remove(tab.find(maphash.String(seed, k), k))
	}
	if !tab.shrink() || len(tab.s) > 64 {
		t.Fatalf("10 keys left in %d slots", len(tab.s))
	}
	for i := 990; i < 1000; i++ {
		k := strconv.Itoa(i)
		if tab.find(maphash.String(seed, k), k) < 0 {
			t.Fatalf("key %s lost by shrink", k)
		}
	}
	for i := 990; i < 1000; i++ {
		k := strconv.Itoa(i)
		tab.remove(tab.find(maphash.String(seed, k), k))
	}
	if !tab.shrink() || tab.s != nil {
		t.Fatalf("an empty table keeps %d slots", len(tab.s))
	}
}

// TestSlotsAligned checks that a slot takes 32 bytes and that the arrays of
// large tables (1,024 slots and more, allocated as whole pages) start on a
// cache line, so that no slot of them straddles two lines. Smaller arrays
// follow the allocator's 8-byte header.
func TestSlotsAligned(t *testing.T) {
	if size := unsafe.Sizeof(slot{}); size != 32 {
		t.Fatalf("a slot takes %d bytes, want 32", size)
	}
	seed := maphash.MakeSeed()
	var tab slots
	for i := range 20_000 {
		key := strconv.Itoa(i)
		tab.insert(maphash.String(seed, key), key)
		if p := uintptr(unsafe.Pointer(&tab.s[0])); len(tab.s) >= 1024 && p%64 != 0 {
			t.Fatalf("an array of %d slots starts at %#x, not on a cache line", len(tab.s), p)
		}
		if len(tab.bc) != len(tab.s) {
			t.Fatalf("%d second words for %d slots", len(tab.bc), len(tab.s))
		}
	}
}

// TestStatesRoundTripAtBounds puts the largest states decide and settle
// produce, under policies at their largest documented parameters, into a
// slot and takes them back: every one must come back exactly.
func TestStatesRoundTripAtBounds(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	const units = 1 << 49
	for _, c := range []struct {
		p      Policy
		states func(pr params) []state
	}{
		{TokenBucket(units, Every(time.Microsecond)), func(pr params) []state {
			return []state{{a: 2 * pr.cap, b: now}, {a: 2 * pr.cap, b: now + 1<<40}, {a: 1, b: now - 1<<40}}
		}},
		{TokenBucket(1, Every(units*time.Microsecond)), func(pr params) []state {
			return []state{{a: 2 * pr.cap, b: now}, {a: pr.cap, b: now + 1}}
		}},
		{GCRA(Every(time.Microsecond), units), func(pr params) []state {
			return []state{{a: now + 2*pr.cap}, {a: now - 1}}
		}},
		{GCRA(Rate{Count: 1 << 49, Period: 3 * time.Microsecond}, 1<<16), func(pr params) []state {
			return []state{{a: now + 2*pr.cap/pr.n, b: pr.n - 1}, {a: now, b: pr.n - 1}}
		}},
		{FixedWindow(1<<48, time.Microsecond), func(pr params) []state {
			return []state{{a: now, b: 2 * pr.limit}, {a: now, b: maxUnits}}
		}},
		{SlidingWindow(maxSlidingLimit, 100*time.Millisecond), func(pr params) []state {
			id := now / pr.w
			return []state{{a: id, b: 2 * pr.limit, c: 2 * pr.limit}, {a: id, b: 2 * pr.limit}, {a: id, c: 2 * pr.limit}}
		}},
		{SlidingWindow(1, (1<<48)*time.Microsecond), func(pr params) []state {
			return []state{{a: now / pr.w, b: 2, c: 2}}
		}},
	} {
		pr, err := c.p.params()
		if err != nil {
			t.Fatalf("%+v: %v", c.p, err)
		}
		tab := &table{pr: pr}
		tab.packing()
		for _, s := range c.states(pr) {
			var sh shard
			sh.t.base = now
			i := sh.t.insert(1, "k")
			tab.put(&sh, i, s, 0)
			if got := tab.take(&sh, i); got != s {
				t.Errorf("%+v: put %+v, took %+v", c.p, s, got)
			}
		}
	}
}
