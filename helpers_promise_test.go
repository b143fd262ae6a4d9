package batcher_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/batchertest"
)

// The helpers of the *_promise_test.go files: tests that check, from the
// outside, what docs/batcher.md promises.

// trackedClock is a fake clock that remembers the channel of every timer and
// ticker a batcher made from it, so a test can tell when the batcher's loop
// has taken every tick that fell due (see drained).
type trackedClock struct {
	*batchertest.FakeClock
	mu    sync.Mutex
	chans []<-chan time.Time
}

func newTrackedClock() *trackedClock {
	return &trackedClock{FakeClock: batchertest.NewFakeClock(time.Time{})}
}

func (c *trackedClock) NewTimer(d time.Duration) batcher.Timer {
	tm := c.FakeClock.NewTimer(d)
	c.track(tm.C())
	return tm
}

func (c *trackedClock) NewTicker(d time.Duration) batcher.Ticker {
	tk := c.FakeClock.NewTicker(d)
	c.track(tk.C())
	return tk
}

func (c *trackedClock) track(ch <-chan time.Time) {
	c.mu.Lock()
	c.chans = append(c.chans, ch)
	c.mu.Unlock()
}

// drained waits until the loop has received every tick and timer that fell
// due. The loop may still be handling the last one when it returns.
func (c *trackedClock) drained(t *testing.T) {
	t.Helper()
	waitFor(t, "the loop to take every tick", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, ch := range c.chans {
			if len(ch) > 0 {
				return false
			}
		}
		return true
	})
}

// barrier lets a test assert that something has NOT happened by fake time
// now: it waits until the loop has taken every due tick, then pushes two
// free (cost 0) non-batchable operations of a watcher of its own through
// the loop, one after the other. The second can only be released in a pass
// of the loop that starts after the pass releasing the first, so once it
// reaches its callback the loop has finished handling every tick that was
// due. It needs a running, unpaused batcher.
type barrier struct {
	clk  *trackedClock
	b    batcher.IBatcher
	w    batcher.IWatcher
	seen atomic.Int64
}

func newBarrier(clk *trackedClock, b batcher.IBatcher) *barrier {
	br := &barrier{clk: clk, b: b}
	br.w = batcher.NewWatcher(func(ops []batcher.IOperation) { br.seen.Add(int64(len(ops))) })
	return br
}

func (br *barrier) sync(t *testing.T) {
	t.Helper()
	br.clk.drained(t)
	for i := 0; i < 2; i++ {
		want := br.seen.Load() + 1
		if err := br.b.Enqueue(batcher.NewOperation(br.w, 0, "barrier", false)); err != nil {
			t.Fatalf("barrier operation refused: %v", err)
		}
		waitFor(t, "the barrier operation", func() bool { return br.seen.Load() >= want })
	}
}

// blocker is a watcher whose callbacks wait until release is called.
type blocker struct {
	w       batcher.IWatcher
	started atomic.Int64
	gate    chan struct{}
	once    sync.Once
}

func newBlocker(t *testing.T) *blocker {
	bl := &blocker{gate: make(chan struct{})}
	bl.w = batcher.NewWatcher(func([]batcher.IOperation) {
		bl.started.Add(1)
		<-bl.gate
	})
	t.Cleanup(bl.release)
	return bl
}

func (bl *blocker) release() { bl.once.Do(func() { close(bl.gate) }) }

// countOf returns how many recorded events have one of the names.
func countOf(rec *batchertest.Recorder, names ...string) int {
	n := 0
	for _, e := range rec.Events() {
		for _, name := range names {
			if e.Name == name {
				n++
			}
		}
	}
	return n
}
