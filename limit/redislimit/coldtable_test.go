package redislimit

import (
	"hash/maphash"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
)

// TestColdTableMatchesMap runs random puts, deletes, lookups and sweeps on a
// coldTable and on a Go map side by side: the table holds what the map
// holds, and its array stays at most three quarters full and, past the
// smallest, at most eight slots a lease.
func TestColdTableMatchesMap(t *testing.T) {
	seed := maphash.MakeSeed()
	rng := rand.New(rand.NewPCG(1, 2))
	var tab coldTable
	model := map[string]*coldLease{}
	key := func() string { return "k" + strconv.Itoa(rng.IntN(3000)) }
	for step := range 200_000 {
		rk := key()
		h := maphash.String(seed, rk)
		switch op := rng.IntN(10); {
		case op < 5:
			if model[rk] == nil {
				c := &coldLease{}
				c.setKey(rk)
				tab.put(h, c)
				model[rk] = c
			}
		case op < 8:
			tab.del(h, rk)
			delete(model, rk)
		case op < 9:
			if got := tab.get(h, rk); got != model[rk] {
				t.Fatalf("step %d: get %q = %p, want %p", step, rk, got, model[rk])
			}
		default:
			// A sweep that removes a tenth of the keys.
			tab.each(func(c *coldLease) bool {
				if rng.IntN(10) == 0 {
					delete(model, c.rk)
					return true
				}
				return false
			})
		}
		if tab.n != len(model) {
			t.Fatalf("step %d: table holds %d, map %d", step, tab.n, len(model))
		}
		if n := len(tab.slots()); (tab.n+tab.tombs)*4 > n*3 || n > coldTableMin && tab.n*8 < n {
			t.Fatalf("step %d: %d leases and %d tombstones in %d slots", step, tab.n, tab.tombs, n)
		}
	}
	for rk, c := range model {
		if got := tab.get(maphash.String(seed, rk), rk); got != c {
			t.Fatalf("get %q = %p, want %p", rk, got, c)
		}
	}
	seen := 0
	tab.each(func(*coldLease) bool { seen++; return false })
	if seen != len(model) {
		t.Fatalf("each saw %d leases, want %d", seen, len(model))
	}
	// Emptied, the table lets its array go; nearly emptied, it shrinks.
	for rk := range model {
		if len(model) == 10 {
			break
		}
		tab.del(maphash.String(seed, rk), rk)
		delete(model, rk)
	}
	if len(tab.slots()) > 8*tab.n {
		t.Fatalf("%d slots for %d leases", len(tab.slots()), tab.n)
	}
	tab.each(func(*coldLease) bool { return true })
	if tab.n != 0 || tab.slots() != nil {
		t.Fatalf("emptied table: %d leases, %d slots", tab.n, len(tab.slots()))
	}
}

// TestColdTableLookupsDuringResizes looks up, without a lock, keys that
// stay in the table while a writer grows and shrinks its array under the
// lock, as the shard's decisions and its lease changes do: every lookup
// finds its key's lease, so no lookup pairs one array's first slot with
// another's length. Run with the race detector, it also checks that the
// lookups read only what is published.
func TestColdTableLookupsDuringResizes(t *testing.T) {
	seed := maphash.MakeSeed()
	var (
		tab coldTable
		mu  sync.Mutex
	)
	type entry struct {
		rk string
		h  uint64
		c  *coldLease
	}
	stay := make([]entry, 8)
	mu.Lock()
	for i := range stay {
		rk := "stay" + strconv.Itoa(i)
		c := &coldLease{}
		c.setKey(rk)
		stay[i] = entry{rk, maphash.String(seed, rk), c}
		tab.put(stay[i].h, c)
	}
	mu.Unlock()
	// The writer runs a fixed number of rounds, not a stretch of time,
	// and the lookups go on until it is done.
	const rounds = 300
	done := make(chan struct{})
	var wg sync.WaitGroup
	var resizes int
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		rng := rand.New(rand.NewPCG(7, 8))
		for range rounds {
			// Up to a few hundred leases in, then all out again: the
			// array doubles several times, then halves back.
			n := 1 + rng.IntN(400)
			mu.Lock()
			before := len(tab.slots())
			for i := range n {
				rk := "r" + strconv.Itoa(i)
				c := &coldLease{}
				c.setKey(rk)
				tab.put(maphash.String(seed, rk), c)
			}
			if len(tab.slots()) != before {
				resizes++
			}
			mu.Unlock()
			for i := range n {
				rk := "r" + strconv.Itoa(i)
				mu.Lock()
				tab.del(maphash.String(seed, rk), rk)
				mu.Unlock()
			}
		}
	}()
	lookups := 0
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		for _, e := range stay {
			if got := tab.get(e.h, e.rk); got != e.c {
				wg.Wait()
				t.Fatalf("after %d lookups: get %q = %p, want %p", lookups, e.rk, got, e.c)
			}
			lookups++
		}
	}
	wg.Wait()
	if resizes == 0 {
		t.Fatal("the writer never resized the array: the test checked nothing")
	}
	t.Logf("%d lookups during %d growths", lookups, resizes)
}
