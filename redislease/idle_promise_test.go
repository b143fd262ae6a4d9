package redislease_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/batchertest"
	"github.com/costwise/batcher/internal/clock"
	"github.com/costwise/batcher/leasetest"
	"github.com/costwise/batcher/redislease"
	"github.com/costwise/batcher/sharing"
)

// commandCounter is a go-redis hook that counts the commands a client sends,
// pipelined ones included.
type commandCounter struct{ n atomic.Int64 }

func (h *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// passClock is a fake clock that tells when the lease loop has finished a
// pass. The loop has one timer; it stops it after every pass and re-arms it
// (Reset) only when it has something due, so a test can tell whether an
// advance of the clock makes a pass due and wait until that pass ended.
type passClock struct {
	*batchertest.FakeClock
	mu     sync.Mutex
	due    time.Time // when the armed timer fires; zero when disarmed
	passes int       // Stop calls: one after every pass
}

func (c *passClock) NewTimer(d time.Duration) clock.Timer {
	c.mu.Lock()
	c.due = c.Now().Add(d)
	c.mu.Unlock()
	return &passTimer{Timer: c.FakeClock.NewTimer(d), c: c}
}

type passTimer struct {
	clock.Timer
	c *passClock
}

func (t *passTimer) Stop() bool {
	t.c.mu.Lock()
	t.c.due, t.c.passes = time.Time{}, t.c.passes+1
	t.c.mu.Unlock()
	return t.Timer.Stop()
}

func (t *passTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	t.c.due = t.c.Now().Add(d)
	t.c.mu.Unlock()
	return t.Timer.Reset(d)
}

func (c *passClock) state() (due time.Time, passes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.due, c.passes
}

// advance moves the clock by d and, when that makes the loop's timer fire,
// waits until the pass it starts has ended.
func (c *passClock) advance(t *testing.T, d time.Duration) {
	t.Helper()
	due, before := c.state()
	c.Advance(d)
	if due.IsZero() || c.Now().Before(due) {
		return
	}
	eventually(t, 5*time.Second, "the pass the timer started", func() bool {
		_, passes := c.state()
		return passes > before
	})
}

// TestPromiseIdleInstanceMakesNoCalls checks docs/batcher.md's "An
// instance at full contention makes about 100 Redis commands a minute; an
// idle one makes none" and its table's "idle instance | 0/min", on Redis
// (counting the commands the client sends) and on the in-process lease
// manager (counting the calls that reach it): an instance whose target is
// within its reserved capacity makes no call over a minute, from Start on
// and again after it gave back every partition it held.
func TestPromiseIdleInstanceMakesNoCalls(t *testing.T) {
	stores := []struct {
		name string
		make func(t *testing.T, shared uint32) (*sharing.Resource, func() int64)
	}{
		{"redis", func(t *testing.T, shared uint32) (*sharing.Resource, func() int64) {
			c := sharedClient(t)
			prefix := testPrefix(t, c)
			counter := &commandCounter{}
			c.AddHook(counter)
			return redislease.NewSharedResource(c, prefix, shared), counter.n.Load
		}},
		{"memory", func(t *testing.T, shared uint32) (*sharing.Resource, func() int64) {
			mgr := leasetest.NewFaultManager(sharing.NewMemoryLeaseManager())
			return sharing.New(mgr, shared), func() int64 { return int64(mgr.Calls()) }
		}},
	}
	for _, store := range stores {
		t.Run(store.name, func(t *testing.T) {
			const shared, reserved = 4, 2
			ctx := ctxFor(t)
			clk := &passClock{FakeClock: batchertest.NewFakeClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))}
			res, calls := store.make(t, shared)
			res.WithReservedCapacity(reserved).WithClock(clk)
			mustNil(t, res.Provision(ctx))
			idleMinute := func(when string) {
				t.Helper()
				before := calls()
				for i := 0; i < 60; i++ {
					clk.advance(t, time.Second)
					res.GiveMe(reserved) // within the reserved capacity: still idle
				}
				if n := calls() - before; n != 0 {
					t.Fatalf("%s: an idle instance made %d calls to the store in a minute, want 0", when, n)
				}
			}

			before := calls()
			mustNil(t, res.Start(ctx))
			defer res.Stop()
			eventually(t, 5*time.Second, "the first pass", func() bool { _, p := clk.state(); return p >= 1 })
			if n := calls() - before; n != 0 {
				t.Fatalf("Start with nothing wanted made %d calls to the store, want 0", n)
			}
			idleMinute("after Start")

			res.GiveMe(shared + reserved)
			eventually(t, 5*time.Second, "every partition", func() bool { return res.Capacity() == shared+reserved })
			res.GiveMe(0)
			eventually(t, 5*time.Second, "every partition given back", func() bool {
				return res.Capacity() == reserved && res.Stats().Held == 0
			})
			// Let the loop finish what giving back leaves due.
			for i := 0; i < 3; i++ {
				clk.advance(t, time.Second)
			}
			idleMinute("after giving back every partition")
		})
	}
}
