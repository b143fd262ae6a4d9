package redislimit

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
)

// TestHotTableFindsEachKey builds tables of random sizes whose keys share
// few hashes (so that probing passes over slots of other keys with the
// same hash and of other hashes) and looks up every key, and keys absent.
func TestHotTableFindsEachKey(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	if newHotTable(nil) != nil {
		t.Fatal("a table of no allowances is not nil")
	}
	for round := range 200 {
		n := 1 + rng.IntN(300)
		hashes := uint64(1 + rng.IntN(n)) // as few as one hash for all
		recs := map[string]*allowance{}
		for i := range n {
			rk := "k" + strconv.Itoa(i)
			recs[rk] = &allowance{rk: rk, h: rng.Uint64N(hashes) * 0x9e3779b97f4a7c15}
		}
		tab := newHotTable(recs)
		if len(tab.slots) < 2*n {
			t.Fatalf("round %d: %d slots for %d keys, want at least twice as many", round, len(tab.slots), n)
		}
		for rk, r := range recs {
			if got := tab.get(r.h, rk); got != r {
				t.Fatalf("round %d: get %q = %p, want %p", round, rk, got, r)
			}
		}
		for i := n; i < n+50; i++ {
			h := rng.Uint64N(hashes) * 0x9e3779b97f4a7c15
			if got := tab.get(h, "k"+strconv.Itoa(i)); got != nil {
				t.Fatalf("round %d: absent key found: %p", round, got)
			}
		}
	}
}

// TestStripesCountEveryAdd adds from many goroutines at once, each from
// frames of different depths (a stack that grows moves), and reads the
// exact sum.
func TestStripesCountEveryAdd(t *testing.T) {
	var s stripes
	var deep func(d int)
	deep = func(d int) {
		var pad [256]byte
		if d > 0 {
			deep(d - 1)
		}
		s.add(int64(1 + pad[d%256]))
	}
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := range 1000 {
				deep((g + i) % 40)
			}
		})
	}
	wg.Wait()
	// Each call of deep(d) adds d+1 ones.
	var want int64
	for g := range 64 {
		for i := range 1000 {
			want += int64((g+i)%40 + 1)
		}
	}
	if got := s.load(); got != want {
		t.Fatalf("sum %d, want %d", got, want)
	}
}
