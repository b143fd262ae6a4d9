package batcher_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/costwise/batcher"
)

// costByWatcher counts the cost each watcher's callbacks were given.
type costByWatcher struct {
	mu   sync.Mutex
	cost map[batcher.IWatcher]int
}

func (c *costByWatcher) watcher() *batcher.Watcher {
	var w *batcher.Watcher
	w = batcher.NewWatcher(func(ops []batcher.IOperation) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, op := range ops {
			c.cost[w] += int(op.Cost())
		}
	}).(*batcher.Watcher)
	return w
}

func (c *costByWatcher) of(w batcher.IWatcher) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cost[w]
}

// TestPromiseFairReleaseDefaultsAndLowShare checks, under WithFairRelease
// with every watcher backlogged, the Watcher table's defaults
// "WithWeight(w) | 1" and "WithPriority(p) | PriorityHigh", and "Low gets
// capacity only while no high-priority batch is ready, except for
// LowPriorityShare, 2 % of the released cost while both classes wait" (the
// scenario table: high's share 97.8–98.0 %). Watcher a is left at the
// defaults; b has weight 2 and c weight 1 given explicitly; l is low.
// Over 3 s at 10,000/s, a and c each get a quarter of high's 98 %, b half,
// l 2 %. The existing tests (TestFairReleaseWeights,
// TestFairReleasePriorities) give every watcher its weight and check only
// that low is not starved and high gets at least 95 %.
func TestPromiseFairReleaseDefaultsAndLowShare(t *testing.T) {
	for _, batchable := range []bool{false, true} {
		t.Run(fmt.Sprintf("batchable %v", batchable), func(t *testing.T) {
			clk := newTrackedClock()
			b, _ := startedOn(t, clk, batcher.DefaultBufferSize, func(b *batcher.Batcher) {
				b.WithRateLimiter(batcher.NewProvisionedResource(10000))
				b.WithFairRelease()
			})
			br := newBarrier(clk, b)
			got := &costByWatcher{cost: map[batcher.IWatcher]int{}}
			a := got.watcher()
			bw := got.watcher().WithWeight(2)
			c := got.watcher().WithWeight(1)
			l := got.watcher().WithPriority(batcher.PriorityLow)
			for _, w := range []*batcher.Watcher{a, bw, c, l} {
				w.WithMaxBatchSize(10)
				for i := 0; i < 2000; i++ { // 20,000 cost each: more than 3 s of any share
					if err := b.Enqueue(batcher.NewOperation(w, 10, i, batchable)); err != nil {
						t.Fatal(err)
					}
				}
			}
			// The starting credit went to whichever watcher's operations the
			// loop took first, alone; the shares count from here.
			br.sync(t)
			a0, b0, c0, l0 := got.of(a), got.of(bw), got.of(c), got.of(l)
			for i := 0; i < 30; i++ {
				clk.Advance(batcher.DefaultFlushInterval)
				br.sync(t)
			}
			ca, cb, cc, cl := got.of(a)-a0, got.of(bw)-b0, got.of(c)-c0, got.of(l)-l0
			total := ca + cb + cc + cl
			t.Logf("released in 3 s: default %d, weight 2 %d, weight 1 %d, low %d (%.2f %%)", ca, cb, cc, cl, 100*float64(cl)/float64(total))
			if total < 29000 || total > 31000 {
				t.Fatalf("released %d cost in 3 s at 10,000/s, want 30,000", total)
			}
			if r := float64(ca) / float64(cc); r < 0.95 || r > 1.05 {
				t.Errorf("the default watcher got %d, the one of weight 1 %d: ratio %.3f, want 1 (default weight 1)", ca, cc, r)
			}
			if r := float64(cb) / float64(ca); r < 1.9 || r > 2.1 {
				t.Errorf("weight 2 got %d, the default watcher %d: ratio %.3f, want 2", cb, ca, r)
			}
			if share := float64(cl) / float64(total); share < 0.015 || share > 0.025 {
				t.Errorf("low got %.2f %% of the released cost while high waited, want 2 %% (LowPriorityShare)", 100*share)
			}
		})
	}
}

// TestPromiseWatcherNamesBounded: "WithName(s) | "" | counts its releases
// under s in Stats().Watchers and the metrics (at most 100 names)", with
// "the rest under other", and Stats().Classes per class; an unnamed watcher
// counts only in its class. 150 tenants of one watcher each make 100 names
// and other; 300 watchers of 3 tenants make 3 names.
func TestPromiseWatcherNamesBounded(t *testing.T) {
	cases := []struct {
		name     string
		watchers int
		tenants  int
		want     int // entries in Stats().Watchers
	}{
		{"150 names", 150, 150, 101},
		{"300 watchers, 3 names", 300, 3, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, _, _ := started(t, func(b *batcher.Batcher) { b.WithFairRelease() })
			c := &collector{}
			for i := 0; i < tc.watchers; i++ {
				w := c.watcher().(*batcher.Watcher).WithName(fmt.Sprint("tenant-", i%tc.tenants))
				if err := b.Enqueue(batcher.NewOperation(w, 2, i, false)); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Enqueue(batcher.NewOperation(c.watcher(), 2, "unnamed", false)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "every operation", func() bool { return c.ops.Load() == int64(tc.watchers+1) })
			waitFor(t, "the counters", func() bool { return b.Stats().Classes["high"].Operations == uint64(tc.watchers+1) })
			s := b.Stats()
			if len(s.Watchers) != tc.want {
				t.Fatalf("%d entries in Stats().Watchers, want %d", len(s.Watchers), tc.want)
			}
			var ops, cost uint64
			for name, n := range s.Watchers {
				ops, cost = ops+n.Operations, cost+n.Cost
				if name == batcher.OtherWatchers {
					continue
				}
				if want := uint64(tc.watchers / tc.tenants); n.Operations != want {
					t.Errorf("%s: %d operations, want %d", name, n.Operations, want)
				}
			}
			if ops != uint64(tc.watchers) || cost != 2*uint64(tc.watchers) {
				t.Fatalf("Stats().Watchers adds up to %d operations of cost %d, want the %d named ones of cost %d",
					ops, cost, tc.watchers, 2*tc.watchers)
			}
			if tc.want > 100 {
				if got := s.Watchers[batcher.OtherWatchers].Operations; got != uint64(tc.watchers-100) {
					t.Fatalf("%s: %d operations, want the %d of the names past the first 100", batcher.OtherWatchers, got, tc.watchers-100)
				}
			}
		})
	}
}

// ownWatcher is a watcher type of a user's own: an IWatcher that states its
// weight, class and name by implementing FairWatcher.
type ownWatcher struct {
	batcher.IWatcher
	weight   uint32
	priority batcher.Priority
	name     string
}

func (w *ownWatcher) Weight() uint32             { return w.weight }
func (w *ownWatcher) Priority() batcher.Priority { return w.priority }
func (w *ownWatcher) Name() string               { return w.name }

// plainWatcher is a watcher type of a user's own that does not implement
// FairWatcher.
type plainWatcher struct{ batcher.IWatcher }

// TestPromiseOwnWatcherTypesUnderFairRelease: "A watcher type of your own
// takes part by implementing FairWatcher (Weight, Priority, Name)", and
// FairWatcher's doc, "A watcher that does not is released with weight 1, in
// PriorityHigh, without a name". With every watcher backlogged, a FairWatcher
// of weight 3 gets three times the share of a plain IWatcher and of a
// *Watcher at the defaults; one that states weight 0 and priority 7
// (values out of range) is taken as weight 1 and PriorityLow, and gets 2 %.
func TestPromiseOwnWatcherTypesUnderFairRelease(t *testing.T) {
	clk := newTrackedClock()
	b, _ := startedOn(t, clk, batcher.DefaultBufferSize, func(b *batcher.Batcher) {
		b.WithRateLimiter(batcher.NewProvisionedResource(10000))
		b.WithFairRelease()
	})
	br := newBarrier(clk, b)
	got := &costByWatcher{cost: map[batcher.IWatcher]int{}}
	counted := func() batcher.IWatcher { return got.watcher().WithMaxBatchSize(10) }
	// The inner *Watcher of each keys its released cost.
	ownInner, plainInner, ref, oddInner := counted(), counted(), counted(), counted()
	own := &ownWatcher{IWatcher: ownInner, weight: 3, priority: batcher.PriorityHigh, name: "own"}
	plain := &plainWatcher{IWatcher: plainInner}
	odd := &ownWatcher{IWatcher: oddInner, weight: 0, priority: batcher.Priority(7), name: "odd"}
	for _, w := range []batcher.IWatcher{own, plain, ref, odd} {
		for i := 0; i < 2000; i++ {
			if err := b.Enqueue(batcher.NewOperation(w, 10, i, false)); err != nil {
				t.Fatal(err)
			}
		}
	}
	br.sync(t)
	c0 := map[batcher.IWatcher]int{}
	for _, w := range []batcher.IWatcher{ownInner, plainInner, ref, oddInner} {
		c0[w] = got.of(w)
	}
	for i := 0; i < 30; i++ {
		clk.Advance(batcher.DefaultFlushInterval)
		br.sync(t)
	}
	co, cp, cr, cd := got.of(ownInner)-c0[ownInner], got.of(plainInner)-c0[plainInner], got.of(ref)-c0[ref], got.of(oddInner)-c0[oddInner]
	total := co + cp + cr + cd
	t.Logf("released in 3 s: FairWatcher of weight 3 %d, plain %d, *Watcher %d, weight 0 priority 7 %d (%.2f %%)",
		co, cp, cr, cd, 100*float64(cd)/float64(total))
	if r := float64(cp) / float64(cr); r < 0.95 || r > 1.05 {
		t.Errorf("a plain IWatcher got %d, a default *Watcher %d: ratio %.3f, want 1 (weight 1, PriorityHigh)", cp, cr, r)
	}
	if r := float64(co) / float64(cr); r < 2.85 || r > 3.15 {
		t.Errorf("a FairWatcher of weight 3 got %d, a default *Watcher %d: ratio %.3f, want 3", co, cr, r)
	}
	if share := float64(cd) / float64(total); share < 0.015 || share > 0.025 {
		t.Errorf("a FairWatcher of priority 7 got %.2f %%, want the low class's 2 %%", 100*share)
	}
	s := b.Stats()
	if len(s.Watchers) != 2 || s.Watchers["own"].Cost == 0 || s.Watchers["odd"].Cost == 0 {
		t.Errorf("Stats().Watchers = %v, want the names own and odd only", s.Watchers)
	}
}

// TestPromiseFairReleasePieces: "While several watchers are ready, a batch
// costing more than a sixteenth of a flush interval's worth of capacity is
// released in pieces of about that cost ...; a lone watcher's batches are not
// cut into such pieces (a flush may still split one, as in order)." At
// 10,000/s and a 100-ms flush interval a sixteenth is 62.5: batches of 50
// operations of cost 10 (500) go whole for a lone watcher (but for the split
// a flush may make), and in pieces of at most 7 operations (the shortest
// prefix reaching 62.5) for two backlogged watchers. With a 1-s flush
// interval (a sixteenth: 625) they are never cut into pieces. The operations
// are enqueued before Start, so that the loop has taken every watcher's
// before its first release.
func TestPromiseFairReleasePieces(t *testing.T) {
	cases := []struct {
		flush   time.Duration
		twoMost int // most operations in one callback while two watchers wait
	}{
		{100 * time.Millisecond, 7},
		{time.Second, 50},
	}
	for _, tc := range cases {
		for _, watchers := range []int{1, 2} {
			t.Run(fmt.Sprintf("flush %v, %d watchers", tc.flush, watchers), func(t *testing.T) {
				clk := newTrackedClock()
				b := batcher.New(batcher.DefaultBufferSize).WithClock(clk)
				b.WithRateLimiter(batcher.NewProvisionedResource(10000)).WithFlushInterval(tc.flush)
				b.WithFairRelease()
				var mu sync.Mutex
				var sizes []int
				w := make([]batcher.IWatcher, watchers)
				for k := range w {
					w[k] = batcher.NewWatcher(func(ops []batcher.IOperation) {
						mu.Lock()
						sizes = append(sizes, len(ops))
						mu.Unlock()
					}).WithMaxBatchSize(50)
					for i := 0; i < 4000; i++ {
						if err := b.Enqueue(batcher.NewOperation(w[k], 10, i, true)); err != nil {
							t.Fatal(err)
						}
					}
				}
				if err := b.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(b.Stop)
				released := func() int {
					mu.Lock()
					defer mu.Unlock()
					n := 0
					for _, s := range sizes {
						n += s
					}
					return n
				}
				// The starting credit's releases, before the clock moves.
				waitFor(t, "the starting credit's releases", func() bool { return released() >= 100 })
				for i := 0; i < 4; i++ {
					clk.Advance(tc.flush)
					clk.drained(t)
				}
				// 4 intervals' worth and the starting one: about 5,000 cost.
				waitFor(t, "releases", func() bool { return released() >= 450 })
				mu.Lock()
				defer mu.Unlock()
				most, parts := 0, 0
				for _, s := range sizes {
					most = max(most, s)
					if s != 50 {
						parts++
					}
				}
				if watchers == 2 {
					if most > tc.twoMost {
						t.Fatalf("with two watchers backlogged a callback got %d operations (cost %d), want at most %d: %v",
							most, 10*most, tc.twoMost, sizes)
					}
					return
				}
				// At most one split per flush, in two parts.
				if parts > 8 {
					t.Fatalf("a lone watcher's batches of 50 were released as %v: cut into pieces", sizes)
				}
			})
		}
	}
}
