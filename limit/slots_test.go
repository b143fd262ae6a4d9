package limit

import (
	"hash/maphash"
	"math/rand/v2"
	"strconv"
	"testing"
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
