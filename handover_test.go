package batcher

import "testing"

// The stamps travel with their operations through wrap-around, growth and
// partial takes; an operation pushed into an empty or stale ring gets the
// reading given with it, any other the latest reading the ring knows (the
// loop's at its last take included); an operation held when stamping
// starts gets the stamp given then.
func TestHandoverStampsFollowOperations(t *testing.T) {
	h := newHandover(4)
	ops := make([]*Operation, 60)
	for i := range ops {
		ops[i] = &Operation{cost: uint32(i)}
	}
	h.push(ops[0], 0) // held before stamping starts
	h.stamp(true, 5)
	want := []int64{5} // the stamp each operation must come out with
	lastAt := int64(5)
	stale := true // no take yet
	next, taken := 1, 0
	var dst [3]*Operation
	var at [3]int64
	for round := 0; taken < len(ops); round++ {
		for k := 0; k < 1+round%5 && next < len(ops); k++ { // pushes outgrow the ring
			now := int64(1000 * next)
			if !h.needsClock() && h.len() == 0 {
				t.Fatal("an empty ring must read the clock")
			}
			if h.needsClock() != (h.len() == 0 || stale) {
				t.Fatalf("op %d: needsClock %v with %d held, stale %v", next, h.needsClock(), h.len(), stale)
			}
			if h.needsClock() {
				lastAt = now
			}
			want = append(want, lastAt)
			h.push(ops[next], now)
			next++
		}
		if round%7 == 3 {
			h.hold()
			stale = true
			continue
		}
		loopNow := int64(1000*next - 500)
		n := h.take(dst[:1+round%3], at[:], loopNow)
		lastAt, stale = loopNow, false
		for i := 0; i < n; i++ {
			if dst[i] != ops[taken] || at[i] != want[taken] {
				t.Fatalf("round %d: took op %d stamped %d, want op %d stamped %d", round, dst[i].cost, at[i], taken, want[taken])
			}
			taken++
		}
		if round > 1000 {
			t.Fatalf("stuck at op %d", taken)
		}
	}
	if h.len() != 0 || len(h.buf) != len(h.at) || len(h.buf) == 4 {
		t.Fatalf("len %d, %d slots and %d stamps (the ring must have grown)", h.len(), len(h.buf), len(h.at))
	}
	h.stamp(false, 0)
	if h.stamping() || h.needsClock() {
		t.Fatal("still stamping")
	}
}
