package redislease_test

import (
	"testing"
	"time"

	"github.com/costwise/batcher/batchertest"
	"github.com/costwise/batcher/redislease"
	"github.com/costwise/batcher/sharing"
)

// TestPromiseRedisCommandsAtFullContention checks docs/batcher.md's "An
// instance at full contention makes about 100 Redis commands a minute" and
// its table's goal "storage calls per instance at full contention ... ≤
// 120/min" on Redis, counting the commands each instance's client sends:
// 4 instances with the defaults, each asking for all 20 partitions of one
// prefix, driven on one fake clock. After 10 s to settle, every instance
// holds its 5 partitions for a minute and sends at most 120 commands in it.
func TestPromiseRedisCommandsAtFullContention(t *testing.T) {
	const instances, shared = 4, 20
	fake := batchertest.NewFakeClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	first := sharedClient(t)
	prefix := testPrefix(t, first)
	ctx := ctxFor(t)
	var (
		res      []*sharing.Resource
		clocks   []*passClock
		counters []*commandCounter
	)
	for i := 0; i < instances; i++ {
		c := sharedClient(t)
		counter := &commandCounter{}
		c.AddHook(counter)
		clk := &passClock{FakeClock: fake}
		r := redislease.NewSharedResource(c, prefix, shared).WithClock(clk)
		mustNil(t, r.Provision(ctx))
		mustNil(t, r.Start(ctx))
		defer r.Stop()
		res, clocks, counters = append(res, r), append(clocks, clk), append(counters, counter)
	}
	// GiveMe wakes a loop at once, not through its timer: wait for the
	// pass it starts before moving the clock. Nothing else wakes it.
	for i, clk := range clocks {
		eventually(t, 5*time.Second, "the first pass", func() bool { _, p := clk.state(); return p >= 1 })
		res[i].GiveMe(shared)
		eventually(t, 5*time.Second, "the pass GiveMe starts", func() bool { _, p := clk.state(); return p >= 2 })
	}
	// advance moves the one clock and waits for every pass it made due.
	advance := func(d time.Duration) {
		t.Helper()
		before := make([]int, instances)
		due := make([]time.Time, instances)
		for i, clk := range clocks {
			due[i], before[i] = clk.state()
		}
		fake.Advance(d)
		for i, clk := range clocks {
			if due[i].IsZero() || fake.Now().Before(due[i]) {
				continue
			}
			eventually(t, 5*time.Second, "a pass", func() bool { _, p := clk.state(); return p > before[i] })
		}
	}
	const step = 20 * time.Millisecond
	for elapsed := time.Duration(0); elapsed < 10*time.Second; elapsed += step {
		advance(step)
	}
	start := make([]int64, instances)
	for i, c := range counters {
		start[i] = c.n.Load()
	}
	for elapsed := time.Duration(0); elapsed < time.Minute; elapsed += step {
		advance(step)
		if elapsed%time.Second == 0 {
			for i, r := range res {
				if got := r.Capacity(); got != shared/instances {
					t.Fatalf("instance %d holds capacity %d at %v of the minute, want its fair share %d", i, got, elapsed, shared/instances)
				}
			}
		}
	}
	for i, c := range counters {
		n := c.n.Load() - start[i]
		t.Logf("instance %d: %d Redis commands in a minute", i, n)
		if n > 120 {
			t.Errorf("instance %d sent %d Redis commands in a minute at full contention, want at most 120 (about 100)", i, n)
		}
	}
}
