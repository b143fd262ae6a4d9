package batcher

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/costwise/batcher/batchertest"
)

// byWatcher records, per watcher, the released cost and the time of each
// release, from the batch events of a harness.
type byWatcher struct {
	mu    sync.Mutex
	h     *harness
	cost  map[IWatcher]uint64
	first map[IWatcher]time.Duration
	last  map[IWatcher]time.Duration
	log   []watcherRelease
}

type watcherRelease struct {
	w    IWatcher
	at   time.Duration
	cost uint64
}

func recordByWatcher(h *harness) *byWatcher {
	r := &byWatcher{h: h, cost: map[IWatcher]uint64{}, first: map[IWatcher]time.Duration{}, last: map[IWatcher]time.Duration{}}
	h.b.AddListener(func(event string, val int, msg string, md interface{}) {
		if event != BatchEvent {
			return
		}
		ops := md.([]IOperation)
		var cost uint64
		for _, op := range ops {
			cost += uint64(op.Cost())
		}
		w, at := ops[0].Watcher(), h.fc.Now().Sub(t0)
		r.mu.Lock()
		defer r.mu.Unlock()
		if _, ok := r.first[w]; !ok {
			r.first[w] = at
		}
		r.last[w] = at
		r.cost[w] += cost
		r.log = append(r.log, watcherRelease{w, at, cost})
	})
	return r
}

// costIn returns the cost released for w in [from, to).
func (r *byWatcher) costIn(w IWatcher, from, to time.Duration) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var sum uint64
	for _, x := range r.log {
		if x.w == w && x.at >= from && x.at < to {
			sum += x.cost
		}
	}
	return sum
}

// watcherShapes are the ways a backlog can be batched.
var watcherShapes = []struct {
	name      string
	batchable bool
	max       uint32
}{
	{"single", false, 0},
	{"batches of 10", true, 10},
	{"batches of 100", true, 100},
	{"unbounded batches", true, 0},
}

// TestFairReleaseNewcomer: A enqueues 100,000 operations of cost 10 at
// t=0, B 100 at t=1 s, capacity 10,000/s, equal weights: B's last operation
// is released by 1.25 s (in order, it would wait for A's whole backlog,
// about 100 s).
func TestFairReleaseNewcomer(t *testing.T) {
	for _, shape := range watcherShapes {
		t.Run(shape.name, func(t *testing.T) {
			h := newHarness(t, func(b *Batcher) {
				b.WithFairRelease().WithRateLimiter(NewProvisionedResource(10000))
			})
			rec := recordByWatcher(h)
			a := NewWatcher(noop).WithMaxBatchSize(shape.max)
			bw := NewWatcher(noop).WithMaxBatchSize(shape.max)
			h.enqueue(a, 100_000, 10, shape.batchable)
			h.run(time.Second)
			h.enqueue(bw, 100, 10, shape.batchable)
			h.run(time.Second)
			if got := rec.cost[bw]; got != 1000 {
				t.Fatalf("B released %d of its 1000 cost by 2 s", got)
			}
			if last := rec.last[bw]; last > 1250*time.Millisecond {
				t.Errorf("B's last operation released at %v, want ≤ 1.25 s", last)
			}
			for s, got := range h.costPerSecond(2)[1:] {
				if ratio := float64(got) / 10000; ratio < 0.97 || ratio > 1.03 {
					t.Errorf("second %d: released %d cost, %.3f× capacity", s+1, got, ratio)
				}
			}
			t.Logf("B released from %v to %v", rec.first[bw], rec.last[bw])
		})
	}
}

// TestFairReleaseWeights: 8 watchers with weights 1..8, all backlogged:
// over 10 s each one's released cost is within ±5 % of its weighted share.
func TestFairReleaseWeights(t *testing.T) {
	for _, shape := range watcherShapes {
		t.Run(shape.name, func(t *testing.T) {
			h := newHarness(t, func(b *Batcher) {
				b.WithFairRelease().WithRateLimiter(NewProvisionedResource(10000))
			})
			rec := recordByWatcher(h)
			var ws []*Watcher
			for i := 1; i <= 8; i++ {
				w := NewWatcher(noop).(*Watcher).WithWeight(uint32(i)).WithName(fmt.Sprint("w", i))
				w.WithMaxBatchSize(shape.max)
				ws = append(ws, w)
				h.enqueue(w, 500*i, 10, shape.batchable) // 5,000·i cost: more than 10 s of its share
			}
			h.run(10 * time.Second)
			var total uint64
			for _, w := range ws {
				total += rec.costIn(w, 0, 10*time.Second)
			}
			if r := float64(total) / 100_000; r < 0.97 || r > 1.03 {
				t.Errorf("released %d cost in 10 s, %.3f× capacity", total, r)
			}
			stats := h.b.Stats()
			lo, hi := 2.0, 0.0
			defer func() { t.Logf("shares %.3f–%.3f× the weighted share", lo, hi) }()
			for i, w := range ws {
				got := rec.costIn(w, 0, 10*time.Second)
				share := float64(total) * float64(i+1) / 36
				r := float64(got) / share
				lo, hi = min(lo, r), max(hi, r)
				if r < 0.95 || r > 1.05 {
					t.Errorf("weight %d: released %d cost, %.3f× its share %.0f", i+1, got, r, share)
				}
				if n := stats.Watchers[w.Name()].Cost; n != rec.cost[w] {
					t.Errorf("Stats().Watchers[%q].Cost = %d, want %d", w.Name(), n, rec.cost[w])
				}
			}
		})
	}
}

// TestFairReleasePriorities: high and low both backlogged: high gets at
// least 95 % while its backlog lasts, and low resumes within one flush
// interval after.
func TestFairReleasePriorities(t *testing.T) {
	for _, shape := range watcherShapes {
		t.Run(shape.name, func(t *testing.T) {
			h := newHarness(t, func(b *Batcher) {
				b.WithFairRelease().WithRateLimiter(NewProvisionedResource(10000))
			})
			rec := recordByWatcher(h)
			high := NewWatcher(noop).(*Watcher).WithName("interactive")
			high.WithMaxBatchSize(shape.max)
			low := NewWatcher(noop).(*Watcher).WithPriority(PriorityLow).WithName("bulk")
			low.WithMaxBatchSize(shape.max)
			h.enqueue(low, 5000, 10, shape.batchable)
			h.enqueue(high, 3000, 10, shape.batchable) // 3 s of capacity
			h.run(5 * time.Second)
			end := rec.last[high]
			hi, lo := rec.costIn(high, 0, end+1), rec.costIn(low, 0, end+1)
			if hi != 30000 {
				t.Fatalf("high released %d of 30000", hi)
			}
			if share := float64(hi) / float64(hi+lo); share < 0.95 {
				t.Errorf("high got %.3f of the cost until its backlog ended at %v, want ≥ 0.95", share, end)
			}
			if lo == 0 {
				t.Errorf("low got nothing in %v: starved", end)
			}
			next := rec.costIn(low, end+1, end+DefaultFlushInterval+1)
			if next == 0 {
				t.Errorf("low released nothing within a flush interval after high's backlog ended at %v", end)
			}
			gap := time.Duration(-1)
			rec.mu.Lock()
			for _, x := range rec.log {
				if x.w == low && x.at > end {
					gap = x.at - end
					break
				}
			}
			rec.mu.Unlock()
			t.Logf("high's backlog ended at %v; low had %d cost (%.2f %%) by then; its next release %v later, %d cost in the next flush interval",
				end, lo, 100*float64(lo)/float64(hi+lo), gap, next)
			cl := h.b.Stats().Classes
			if cl["high"].Cost != 30000 || cl["low"].Cost != rec.cost[low] {
				t.Errorf("Stats().Classes = %+v", cl)
			}
		})
	}
}

// TestFairReleaseRate runs the cases of TestRateConvergesToCapacity with
// fair release and three watchers of different weights sharing the backlog.
func TestFairReleaseRate(t *testing.T) {
	cases := []struct {
		capacity  uint32
		cost      uint32
		flush     time.Duration
		batchable bool
	}{
		{1000, 10, 100 * time.Millisecond, true},
		{1000, 33, 100 * time.Millisecond, true},
		{50, 10, 100 * time.Millisecond, false},
		{10000, 1, 100 * time.Millisecond, true},
		{1000, 10, 10 * time.Millisecond, false},
		{1000, 10, time.Millisecond, false},
		{1000, 10, time.Millisecond, true},
	}
	for _, tc := range cases {
		name := fmt.Sprintf("cap%d_cost%d_flush%v_batch%v", tc.capacity, tc.cost, tc.flush, tc.batchable)
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, func(b *Batcher) {
				b.WithFairRelease().WithRateLimiter(NewProvisionedResource(tc.capacity)).WithFlushInterval(tc.flush)
			})
			for i := 1; i <= 3; i++ {
				w := NewWatcher(noop).(*Watcher).WithWeight(uint32(i))
				w.WithMaxBatchSize(100)
				h.enqueue(w, int(tc.capacity/tc.cost)*12+10, tc.cost, tc.batchable)
			}
			h.run(10 * time.Second)
			for s, got := range h.costPerSecond(10)[1:] {
				ratio := float64(got) / float64(tc.capacity)
				if ratio < 0.97 || ratio > 1.03 {
					t.Errorf("second %d: released %d cost, %.3f× capacity", s+1, got, ratio)
				}
			}
		})
	}
}

// TestFairReleaseFreeOps: operations of zero cost pass a watcher waiting for
// credit under fair release too, but not an earlier batch of their own
// watcher.
func TestFairReleaseFreeOps(t *testing.T) {
	lim := batchertest.NewLimiter(0)
	lim.SetMaxCapacity(100)
	h := newHarness(t, func(b *Batcher) { b.WithFairRelease().WithRateLimiter(lim) })
	h.enqueue(NewWatcher(noop), 5, 1, false)
	mixed := NewWatcher(noop)
	h.enqueue(mixed, 1, 1, false)
	h.enqueue(mixed, 2, 0, false)
	free := NewWatcher(noop)
	h.enqueue(free, 3, 0, false)
	h.pump()
	if n := h.releasedOps(); n != 3 {
		t.Fatalf("released %d ops at zero capacity, want the 3 free ones of the watcher with nothing else waiting", n)
	}
}

// TestWeightsNeedFairRelease: without WithFairRelease, weights and
// priorities change nothing: batches go in the order they closed, as in
// go-batcher v1.8.0.
func TestWeightsNeedFairRelease(t *testing.T) {
	h := newHarness(t, func(b *Batcher) { b.WithRateLimiter(NewProvisionedResource(1000)) })
	rec := recordByWatcher(h)
	a := NewWatcher(noop).(*Watcher).WithPriority(PriorityLow)
	bw := NewWatcher(noop).(*Watcher).WithWeight(100)
	h.enqueue(a, 200, 10, false) // 2 s of capacity
	h.enqueue(bw, 10, 10, false)
	h.run(time.Second)
	if got := rec.cost[bw]; got != 0 {
		t.Fatalf("in order, B released %d cost while A's backlog lasted", got)
	}
	if h.b.Stats().Classes != nil || h.b.Stats().Watchers != nil {
		t.Fatal("per-class counters without fair release")
	}
}
