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

// TestHeldSkipsKeysNotHot checks allowShard.held through its key bits:
// every published allowance is found, a key removed is not, and most
// keys the shard has no allowance for are turned away by the bits alone
// (a shard holds a few hot keys, and the bits must not be those that
// picked the shard, which all its keys share).
func TestHeldSkipsKeysNotHot(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const shard = uint64(0x5a) << (64 - shardBits)
	inShard := func() uint64 { return shard | rng.Uint64N(1<<(64-shardBits)) }
	var sh allowShard
	sh.recs = map[string]*allowance{}
	if sh.held(inShard(), []byte("k")) != nil {
		t.Fatal("a shard with no allowances held one")
	}
	for i := range 3 {
		// Bits 0, 5 and 10: three keys apart, so that the bit of the
		// one removed below is its own.
		rk := "k" + strconv.Itoa(i)
		h := inShard()&^(63<<(58-shardBits)) | uint64(5*i)<<(58-shardBits)
		sh.recs[rk] = &allowance{rk: rk, h: h}
	}
	sh.publish()
	for rk, r := range sh.recs {
		if got := sh.held(r.h, []byte(rk)); got != r {
			t.Fatalf("held(%q) = %p, want its allowance %p", rk, got, r)
		}
	}
	seen := uint64(0)
	skipped := 0
	const probes = 10000
	for range probes {
		h := inShard()
		seen |= hotBit(h)
		if sh.hotKeys.Load()&hotBit(h) == 0 {
			skipped++
		}
		if sh.held(h, []byte("absent")) != nil {
			t.Fatal("held found a key the shard has no allowance for")
		}
	}
	if seen != ^uint64(0) {
		t.Fatalf("the keys of one shard set bits %#x, want all 64", seen)
	}
	if skipped < probes*9/10 {
		t.Fatalf("%d of %d keys absent from a shard of 3 allowances were skipped by the bits, want 90 %% or more", skipped, probes)
	}
	r := sh.recs["k1"]
	delete(sh.recs, "k1")
	sh.publish()
	if sh.held(r.h, []byte("k1")) != nil {
		t.Fatal("held found an allowance after it left the shard")
	}
	if sh.hotKeys.Load()&hotBit(r.h) != 0 {
		t.Fatal("the bit of a key that left the shard is still set")
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
