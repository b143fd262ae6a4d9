package redislimit

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"unsafe"
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

// TestStripesApartForSmallStacks starts goroutines that keep the smallest
// stack, all alive at once, and checks that no two share a stack block:
// a stripe by 8-KiB block put up to four of them on one line.
func TestStripesApartForSmallStacks(t *testing.T) {
	const n = 32
	blocks := make(chan uint64, n)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			var here byte
			blocks <- stackBlock(unsafe.Pointer(&here))
			<-release
		})
	}
	seen := make(map[uint64]bool, n)
	for range n {
		b := <-blocks
		if seen[b] {
			t.Errorf("two live goroutines in stack block %#x", b)
		}
		seen[b] = true
	}
	close(release)
	wg.Wait()
}

// TestStripeOfNeighbours checks that blocks next to each other, as the
// stacks of goroutines started together mostly are, pick different
// stripes: any four in a row, over a range of addresses.
func TestStripeOfNeighbours(t *testing.T) {
	for b := uint64(0xc000000000 >> stackBlockShift); b < 0xc000000000>>stackBlockShift+1<<16; b++ {
		s := [4]uint64{stripeOf(b), stripeOf(b + 1), stripeOf(b + 2), stripeOf(b + 3)}
		for i := range s {
			for j := i + 1; j < len(s); j++ {
				if s[i] == s[j] {
					t.Fatalf("blocks %#x and %#x share stripe %d", b+uint64(i), b+uint64(j), s[i])
				}
			}
		}
	}
}
