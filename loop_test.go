package batcher

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costwise/batcher/batchertest"
	"github.com/costwise/batcher/internal/clock"
)

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// harness drives a batcher's loop by hand, without its goroutine: it jumps
// the fake clock to the next due timer and runs the loop body for whatever
// fired, so every release decision happens at an exact, known time.
type harness struct {
	t        *testing.T
	fc       *clock.Fake
	b        *Batcher
	l        *loop
	flushEv  Ticker // optional: calls Flush() on every tick
	stopped  bool   // the loop handled Stop
	mu       sync.Mutex
	releases []released
}

type released struct {
	at   time.Duration // since t0
	ops  int
	cost uint64
}

func newHarness(t *testing.T, configure func(b *Batcher)) *harness {
	fc := clock.NewFake(t0)
	b := newBatcher(1 << 20)
	b.WithClock(fc).WithEmitBatch()
	if configure != nil {
		configure(b)
	}
	h := &harness{t: t, fc: fc, b: b}
	b.AddListener(func(event string, val int, msg string, md interface{}) {
		if event != BatchEvent {
			return
		}
		var cost uint64
		for _, op := range md.([]IOperation) {
			cost += uint64(op.Cost())
		}
		h.mu.Lock()
		h.releases = append(h.releases, released{at: fc.Now().Sub(t0), ops: val, cost: cost})
		h.mu.Unlock()
	})
	b.state.Store(stateRunning)
	h.l = newLoop(b)
	return h
}

// pump handles every signal pending now, without blocking, as run would:
// the harness shares the loop's select (poll) and handle.
func (h *harness) pump() {
	for !h.stopped {
		if h.flushEv != nil {
			select {
			case <-h.flushEv.C():
				h.b.Flush()
			default:
			}
		}
		sig, reply, ok := h.l.poll()
		if !ok {
			return
		}
		more := h.l.handle(sig, reply)
		// The harness stands in for the notifier: listeners see each
		// event at the fake time it was raised.
		h.b.undelivered.deliver(&h.b.listeners)
		if !more {
			// It stands in for run and the notifier, which end here.
			h.stopped = true
			close(h.b.loopDone)
			close(h.b.notifierDone)
			return
		}
	}
}

// run advances the fake clock by d, stopping at every due timer.
func (h *harness) run(d time.Duration) { h.advance(d, h.pump) }

// advance moves the fake clock by d, stopping at every due timer, and calls
// drive at each stop to let the loop react.
func (h *harness) advance(d time.Duration, drive func()) {
	end := h.fc.Now().Add(d)
	drive()
	for {
		next, ok := h.fc.Next()
		if !ok || next.After(end) {
			h.fc.Set(end)
			drive()
			return
		}
		h.fc.Set(next)
		drive()
	}
}

func (h *harness) enqueue(w IWatcher, n int, cost uint32, batchable bool) {
	h.t.Helper()
	for i := 0; i < n; i++ {
		if err := h.b.Enqueue(NewOperation(w, cost, i, batchable)); err != nil {
			h.t.Fatalf("enqueue %d: %v", i, err)
		}
	}
}

// costPerSecond returns the released cost in each whole second of [0, secs).
func (h *harness) costPerSecond(secs int) []uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]uint64, secs)
	for _, r := range h.releases {
		if s := int(r.at / time.Second); s < secs {
			out[s] += r.cost
		}
	}
	return out
}

func (h *harness) releasedOps() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.releases {
		n += r.ops
	}
	return n
}

func noop(batch []IOperation) {}

// waitUntil polls cond, for things that happen on goroutines the test does
// not drive (watcher callbacks); it fails after a generous deadline.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10 s")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestRateConvergesToCapacity checks that with a backlog the released cost
// per second equals the capacity within 3%, for the flush intervals, costs
// and capacities that go-batcher v1.8.0 got wrong.
func TestRateConvergesToCapacity(t *testing.T) {
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
				b.WithRateLimiter(NewProvisionedResource(tc.capacity)).WithFlushInterval(tc.flush)
			})
			w := NewWatcher(noop).WithMaxBatchSize(100)
			backlog := int(tc.capacity/tc.cost)*12 + 10
			h.enqueue(w, backlog, tc.cost, tc.batchable)
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

func TestZeroCapacityReleasesOnlyFreeOps(t *testing.T) {
	lim := batchertest.NewLimiter(0)
	lim.SetMaxCapacity(100) // a shared resource holding nothing looks like this
	h := newHarness(t, func(b *Batcher) { b.WithRateLimiter(lim) })
	w := NewWatcher(noop)
	h.enqueue(w, 5, 1, false)
	h.run(10 * time.Second)
	if n := h.releasedOps(); n != 0 {
		t.Fatalf("released %d ops of cost 1 at zero capacity", n)
	}
	h.enqueue(NewWatcher(noop), 3, 0, false) // another watcher: nothing of its own waits
	h.run(time.Second)
	if n := h.releasedOps(); n != 3 {
		t.Fatalf("released %d ops, want the 3 of zero cost", n)
	}
}

func TestFlushDoesNotRaiseRate(t *testing.T) {
	h := newHarness(t, func(b *Batcher) { b.WithRateLimiter(NewProvisionedResource(1000)) })
	h.flushEv = h.fc.NewTicker(time.Millisecond)
	w := NewWatcher(noop).WithMaxBatchSize(100)
	h.enqueue(w, 2000, 10, true)
	h.run(5 * time.Second)
	for s, got := range h.costPerSecond(5)[1:] {
		if got < 970 || got > 1030 {
			t.Errorf("second %d: released %d cost with Flush every 1 ms, want 1000", s+1, got)
		}
	}
}

func TestFullBatchGoesWithoutWaitingForFlush(t *testing.T) {
	h := newHarness(t, nil)
	w := NewWatcher(noop).WithMaxBatchSize(3)
	h.enqueue(w, 7, 1, true)
	h.pump() // no time passes
	h.mu.Lock()
	got := append([]released(nil), h.releases...)
	h.mu.Unlock()
	if len(got) != 2 || got[0].ops != 3 || got[1].ops != 3 {
		t.Fatalf("releases before any flush: %+v, want two full batches of 3", got)
	}
	h.run(DefaultFlushInterval)
	if n := h.releasedOps(); n != 7 {
		t.Fatalf("after one flush interval %d ops released, want 7", n)
	}
}

func TestNonBatchableKeepsWatcherOrder(t *testing.T) {
	h := newHarness(t, nil)
	w := NewWatcher(noop)
	var seq []int
	h.b.AddListener(func(event string, val int, msg string, md interface{}) {
		if event == BatchEvent {
			for _, op := range md.([]IOperation) {
				seq = append(seq, op.Payload().(int))
			}
		}
	})
	for i, batchable := range []bool{true, true, false, true} {
		if err := h.b.Enqueue(NewOperation(w, 1, i, batchable)); err != nil {
			t.Fatal(err)
		}
	}
	h.run(DefaultFlushInterval)
	if fmt.Sprint(seq) != "[0 1 2 3]" {
		t.Fatalf("release order %v, want [0 1 2 3]", seq)
	}
}

func TestDeadlineLowersTarget(t *testing.T) {
	h := newHarness(t, nil)
	block := make(chan struct{})
	defer close(block)
	w := NewWatcher(func([]IOperation) { <-block }).WithMaxOperationTime(2 * time.Second)
	h.enqueue(w, 1, 7, false)
	h.pump()
	if got := h.b.NeedsCapacity(); got != 7 {
		t.Fatalf("target while the callback runs: %d, want 7", got)
	}
	h.run(1999 * time.Millisecond)
	if got := h.b.NeedsCapacity(); got != 7 {
		t.Fatalf("target before the deadline: %d, want 7", got)
	}
	h.run(time.Millisecond)
	if got := h.b.NeedsCapacity(); got != 0 {
		t.Fatalf("target at the deadline: %d, want 0", got)
	}
}

func TestAuditSteps(t *testing.T) {
	var events []string
	h := newHarness(t, func(b *Batcher) {
		b.WithAuditInterval(time.Second).WithMaxOperationTime(3 * time.Second)
		b.AddListener(func(event string, val int, msg string, md interface{}) {
			switch event {
			case AuditPassEvent, AuditSkipEvent, AuditFailEvent:
				events = append(events, fmt.Sprintf("%s:%d", event, val))
			}
		})
	})
	h.run(time.Second) // nothing ever happened
	h.enqueue(NewWatcher(noop), 1, 5, false)
	h.pump() // released at 1 s
	waitUntil(t, func() bool { return h.b.NeedsCapacity() == 0 })
	h.b.target.Add(9) // a leak the audit must find
	h.run(4 * time.Second)
	// 2 s and 3 s: the release at 1 s is younger than 3 s; 4 s: it is not.
	want := "[audit-pass:0 audit-skip:0 audit-skip:0 audit-fail:9 audit-pass:0]"
	if fmt.Sprint(events) != want {
		t.Fatalf("audits %v, want %s", events, want)
	}
	if got := h.b.NeedsCapacity(); got != 0 {
		t.Fatalf("target after audit-fail: %d", got)
	}
}

func TestMaxConcurrentBatches(t *testing.T) {
	h := newHarness(t, func(b *Batcher) { b.WithMaxConcurrentBatches(2) })
	release := make(chan struct{})
	w := NewWatcher(func([]IOperation) { <-release })
	h.enqueue(w, 5, 1, false)
	h.pump()
	if n := h.releasedOps(); n != 2 {
		t.Fatalf("released %d batches with a limit of 2", n)
	}
	if got := h.b.Inflight(); got != 2 {
		t.Fatalf("Inflight() = %d, want 2", got)
	}
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for h.releasedOps() < 5 && time.Now().Before(deadline) {
		<-h.b.wake // a finished callback wakes the loop
		h.b.poke()
		h.pump()
	}
	if n := h.releasedOps(); n != 5 {
		t.Fatalf("released %d after the callbacks returned, want 5", n)
	}
}

// maxWindow returns the largest cost released in any window of length d
// that starts at a release.
func (h *harness) maxWindow(d time.Duration) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var best uint64
	for i, r := range h.releases {
		var sum uint64
		for _, s := range h.releases[i:] {
			if s.at >= r.at+d {
				break
			}
			sum += s.cost
		}
		best = max(best, sum)
	}
	return best
}

// TestStallReleasesNoBurst checks that after the loop was away for a long
// time with a backlog (a blocked listener, a stopped process, a jump of the
// clock) it does not make up for the lost time: no one-second window sees
// more than the capacity, one flush interval's worth and one operation, and
// the rate afterwards is the capacity again.
func TestStallReleasesNoBurst(t *testing.T) {
	for _, stall := range []time.Duration{150 * time.Millisecond, 3 * time.Second, 10 * time.Second} {
		t.Run(stall.String(), func(t *testing.T) {
			const capacity, cost = 1000, 7
			h := newHarness(t, func(b *Batcher) {
				b.WithRateLimiter(NewProvisionedResource(capacity)).WithFlushInterval(100 * time.Millisecond)
			})
			w := NewWatcher(noop).WithMaxBatchSize(10)
			h.enqueue(w, 30*capacity/cost, cost, true)
			h.run(2 * time.Second)
			h.fc.Set(h.fc.Now().Add(stall)) // nothing runs meanwhile
			h.run(3 * time.Second)
			bound := uint64(capacity + capacity/10 + cost)
			if got := h.maxWindow(time.Second); got > bound {
				t.Errorf("a one-second window released %d cost, more than %d", got, bound)
			}
			end := 2*time.Second + stall
			var after uint64
			h.mu.Lock()
			for _, r := range h.releases {
				if r.at >= end+time.Second && r.at < end+3*time.Second {
					after += r.cost
				}
			}
			h.mu.Unlock()
			if ratio := float64(after) / (2 * capacity); ratio < 0.97 || ratio > 1.03 {
				t.Errorf("after the stall: %d cost in 2 s, %.3f× capacity", after, ratio)
			}
		})
	}
}

// TestHarnessShutdown drives a Shutdown through the harness, so that the
// drain and stop signals are handled as run handles them: the batch being
// formed is closed at once and released within the credit, Shutdown
// returns nil, and the loop ends with the shutdown event.
func TestHarnessShutdown(t *testing.T) {
	var shutdowns atomic.Int32
	h := newHarness(t, func(b *Batcher) {
		b.WithRateLimiter(NewProvisionedResource(1000))
		b.AddListener(func(event string, val int, msg string, md interface{}) {
			if event == ShutdownEvent {
				shutdowns.Add(1)
			}
		})
	})
	w := NewWatcher(noop).WithMaxBatchSize(100)
	h.enqueue(w, 150, 1, true) // 100 go at once on the first interval's credit
	h.pump()
	done := make(chan error, 1)
	go func() { done <- h.b.Shutdown(context.Background()) }()
	waitUntil(t, func() bool { h.pump(); return h.l.draining }) // no time passes until the drain is asked
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			h.mu.Lock()
			last := h.releases[len(h.releases)-1].at
			h.mu.Unlock()
			// 50 cost at 1000/s: 50 ms, less the few milliseconds' worth a
			// drain may run below zero (see affordable).
			if n := h.releasedOps(); n != 150 || last < 44*time.Millisecond || last >= DefaultFlushInterval {
				t.Fatalf("%d ops released, the last at %v; want 150, the last once its credit accrued (45–50 ms), before the flush interval", n, last)
			}
			if n := shutdowns.Load(); n != 1 {
				t.Fatalf("%d shutdown events, want 1", n)
			}
			return
		default:
		}
		h.run(time.Millisecond)
		time.Sleep(50 * time.Microsecond) // let the Shutdown goroutine and the callbacks run
	}
}
