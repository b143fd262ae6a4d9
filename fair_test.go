package batcher

import (
	"fmt"
	"strings"
	"testing"
)

// fairSim drives a fairQueue alone: batches are pushed for named watchers
// and released whole, in the order the queue chooses.
type fairSim struct {
	q        *fairQueue
	stats    fairCounters
	watchers map[string]*Watcher
}

func newFairSim() *fairSim {
	s := &fairSim{watchers: map[string]*Watcher{}}
	s.q = newFairQueue(&s.stats)
	return s
}

// watcher returns the watcher called name, made with weight and class on
// first use.
func (s *fairSim) watcher(name string, weight uint32, class Priority) *Watcher {
	w, ok := s.watchers[name]
	if !ok {
		w = NewWatcher(noop).(*Watcher).WithName(name).WithWeight(weight).WithPriority(class)
		s.watchers[name] = w
	}
	return w
}

func (s *fairSim) push(name string, n int, cost uint64) {
	w := s.watchers[name]
	for i := 0; i < n; i++ {
		s.q.push(&pending{w: w, ops: []IOperation{NewOperation(w, uint32(cost), nil, false)}, cost: cost})
	}
}

// release releases n batches whole and returns the watchers' names in order.
func (s *fairSim) release(n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		p := s.q.front()
		if p == nil {
			break
		}
		ops, cost := len(p.ops), p.cost
		p.ops, p.cost = p.ops[:0], 0
		s.q.released(p, ops, cost)
		out = append(out, p.w.(*Watcher).Name())
	}
	return out
}

func TestFairQueueSteps(t *testing.T) {
	s := newFairSim()
	s.watcher("a", 1, PriorityHigh)
	s.watcher("b", 1, PriorityHigh)
	s.watcher("c", 2, PriorityHigh)
	steps := []struct {
		do   func()
		n    int
		want string
	}{
		// a alone: all its batches, in order.
		{func() { s.push("a", 3, 10) }, 2, "a a"},
		// b arrives behind a: it starts at the tag of a's last release
		// (10), before a's next (20), and they alternate at once, instead
		// of b waiting for a's backlog.
		{func() { s.push("a", 100, 10); s.push("b", 3, 10) }, 6, "b a b a b a"},
		// c, of weight 2, gets two batches for each of a's.
		{func() { s.push("c", 100, 10) }, 9, "c c a c c a c c a"},
	}
	for i, st := range steps {
		st.do()
		if got := strings.Join(s.release(st.n), " "); got != st.want {
			t.Fatalf("step %d: released %q, want %q", i, got, st.want)
		}
	}
}

func TestFairQueueCostNotCount(t *testing.T) {
	s := newFairSim()
	s.watcher("big", 1, PriorityHigh)
	s.watcher("small", 1, PriorityHigh)
	s.push("big", 10, 30)
	s.push("small", 30, 10)
	got := strings.Join(s.release(8), " ")
	// Equal cost, not equal batches: big's one batch of 30 against three of
	// small's batches of 10.
	if want := "big small small small big small small small"; got != want {
		t.Fatalf("released %q, want %q", got, want)
	}
}

func TestFairQueueWeightedShares(t *testing.T) {
	s := newFairSim()
	for i := 1; i <= 8; i++ {
		name := fmt.Sprint(i)
		s.watcher(name, uint32(i), PriorityHigh)
		s.push(name, 2000, 10)
	}
	s.release(3600) // 36 weight units × 100 batches
	classes, names := s.stats.snapshot()
	for i := 1; i <= 8; i++ {
		got := names[fmt.Sprint(i)].Cost
		want := uint64(i) * 100 * 10
		if got+10 < want || got > want+10 {
			t.Errorf("weight %d: released %d cost, want %d ± one batch", i, got, want)
		}
	}
	if got := classes["high"].Cost; got != 36000 {
		t.Errorf("high class released %d, want 36000", got)
	}
}

func TestFairQueuePriorities(t *testing.T) {
	s := newFairSim()
	s.watcher("hi", 1, PriorityHigh)
	s.watcher("lo", 1, PriorityLow)
	s.watcher("lo2", 5, Priority(7)) // above PriorityLow counts as low
	s.push("hi", 1000, 10)
	s.push("lo", 1000, 10)
	got := s.release(500)
	n := map[string]int{}
	for _, name := range got {
		n[name]++
	}
	// 2 % for low while high waits: 10 of 500 batches, give or take one.
	if n["lo"] < 9 || n["lo"] > 11 || n["hi"] != 500-n["lo"] {
		t.Fatalf("with both classes ready: %v, want low ≈ 10 of 500", n)
	}
	// Once high has nothing ready, low gets everything at once.
	for s.q.flows[s.watchers["hi"]] != nil {
		s.release(1)
	}
	if got := s.release(5); strings.Join(got, " ") != "lo lo lo lo lo" {
		t.Fatalf("after high's backlog: %v, want low only", got)
	}
	// Low's owed share does not build up while high is idle: high comes
	// back and takes 98 %, low is not served first for what it missed.
	s.push("hi", 200, 10)
	got = s.release(49)
	if got[0] != "hi" {
		t.Fatalf("high back: first release %q, want hi", got[0])
	}
	s.push("lo2", 1, 10)
	if f := s.q.flows[s.watchers["lo2"]]; f.class != PriorityLow || f.weight != 5 {
		t.Fatalf("lo2: class %v weight %v", f.class, f.weight)
	}
}

func TestFairQueueForgetsIdleWatchers(t *testing.T) {
	s := newFairSim()
	for i := 0; i < 100; i++ {
		w := NewWatcher(noop)
		s.q.push(&pending{w: w, ops: []IOperation{NewOperation(w, 1, nil, false)}, cost: 1})
	}
	if s.q.len() != 100 || s.q.active() != 100 {
		t.Fatalf("len %d active %d, want 100 and 100", s.q.len(), s.q.active())
	}
	s.release(100)
	if s.q.len() != 0 || s.q.active() != 0 || s.q.front() != nil {
		t.Fatalf("after releasing all: len %d active %d", s.q.len(), s.q.active())
	}
	if s.q.vtime[PriorityHigh] != 0 {
		t.Fatalf("virtual time %v after the class went idle, want 0", s.q.vtime[PriorityHigh])
	}
}

func TestFairQueuePartialRelease(t *testing.T) {
	s := newFairSim()
	a := s.watcher("a", 1, PriorityHigh)
	s.watcher("b", 1, PriorityHigh)
	big := &pending{w: a, cost: 100}
	for i := 0; i < 10; i++ {
		big.ops = append(big.ops, NewOperation(a, 10, i, true))
	}
	s.q.push(big)
	s.push("b", 10, 10)
	// Release a prefix of a's batch: its tag moves by what went, so b,
	// still at the start, is next until it has caught up.
	if p := s.q.front(); p != big {
		t.Fatal("a's batch is not first")
	}
	big.ops, big.cost = big.ops[3:], 70
	s.q.released(big, 3, 30)
	if got := strings.Join(s.release(4), " "); got != "b b b a" {
		t.Fatalf("after a released 30 of 100: %q, want b b b a", got)
	}
	if n := s.q.len(); n != 7 {
		t.Fatalf("len %d, want 7 batches of b", n)
	}
}

func TestFairCountersBounded(t *testing.T) {
	var c fairCounters
	for i := 0; i < MaxWatcherNames+50; i++ {
		c.named(fmt.Sprint("tenant-", i)).add(1, 2)
	}
	c.named("tenant-0").add(1, 2)
	_, names := c.snapshot()
	if len(names) != MaxWatcherNames+1 {
		t.Fatalf("%d names, want %d and %q", len(names), MaxWatcherNames, OtherWatchers)
	}
	if got := names[OtherWatchers]; got.Operations != 50 || got.Cost != 100 {
		t.Fatalf("other: %+v, want 50 ops of cost 100", got)
	}
	if got := names["tenant-0"]; got.Operations != 2 || got.Batches != 2 {
		t.Fatalf("tenant-0: %+v", got)
	}
}
