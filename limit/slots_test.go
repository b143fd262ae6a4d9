package limit

import (
	"hash/maphash"
	"math/rand/v2"
	"strconv"
	"testing"
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
