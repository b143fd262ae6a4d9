package batcher

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/clock"
)

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

// waitLog records the cost and wait of every released batch.
type waitLog struct {
	mu    sync.Mutex
	ops   []int
	costs []uint64
	waits []time.Duration
}

func (l *waitLog) ObserveBatch(n int, cost uint64, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ops = append(l.ops, n)
	l.costs = append(l.costs, cost)
	l.waits = append(l.waits, wait)
}

// Operations pushed while the loop leaves the hand-over's operations there
// (blocked at capacity 0) count their wait from their own Enqueue, not from
// the loop's last take: the first 5,000 are enqueued at 0 and the loop
// holds most of them in the hand-over; the next 5,000, of cost 2, at 1 s;
// all are released at one tick, at R, each alone. Those of the first wait
// R, the others R - 1 s, exactly.
func TestHeldHandoverStampsEachPush(t *testing.T) {
	fc := clock.NewFake(time.Unix(1_700_000_000, 0))
	obs := &waitLog{}
	rl := NewProvisionedResource(1000)
	rl.SetCapacity(0)
	b := New(20_000).WithClock(fc).WithObserver(obs)
	b.WithRateLimiter(rl)
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	var released atomic.Int64
	w := NewWatcher(func(ops []IOperation) { released.Add(int64(len(ops))) })
	enqueue := func(cost uint32) {
		for i := 0; i < 5000; i++ {
			if err := b.Enqueue(NewOperation(w, cost, nil, false)); err != nil {
				t.Fatal(err)
			}
		}
	}
	enqueue(1)
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		held := b.incoming.stale && b.incoming.len() > 0
		b.mu.Unlock()
		if held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the loop never left operations in the hand-over")
		}
		time.Sleep(time.Millisecond)
	}
	fc.Advance(time.Second)
	enqueue(2)
	fc.Advance(9 * time.Second)
	rl.SetCapacity(1_000_000_000)
	start := fc.Now()
	fc.Advance(100 * time.Millisecond)
	for released.Load() < 10_000 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 10000 released", released.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if fc.Now() != start.Add(100*time.Millisecond) {
		t.Fatal("the clock moved")
	}
	r := 10*time.Second + 100*time.Millisecond
	obs.mu.Lock()
	defer obs.mu.Unlock()
	second := 0
	for i, cost := range obs.costs {
		want := r
		if cost == 2 {
			want = r - time.Second
			second++
		}
		if obs.ops[i] != 1 || obs.waits[i] != want {
			t.Fatalf("batch %d (%d operations of cost %d) waited %v, want %v", i, obs.ops[i], cost, obs.waits[i], want)
		}
	}
	if second != 5000 {
		t.Fatalf("%d batches of the second 5,000, want 5000", second)
	}
}
