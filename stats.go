package batcher

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// BatchObserver receives one call per released batch, on the batcher's loop
// goroutine, with the number of operations, their total cost, and how long
// the oldest of them waited between Enqueue accepting it and release, on
// the batcher's clock. The wait includes any time the operation spent in
// the hand-over to the loop (a backlog the loop leaves there while it is
// blocked, for example); it may be longer than the true wait by at most one
// pass of the loop, never shorter. Operations enqueued before WithObserver
// or WithClock count from that call. With an observer set, the hand-over
// keeps 8 bytes more per buffered operation, and Enqueue reads the clock
// when the hand-over is empty or the loop is blocked.
// It exists for metrics (see package metrics/prometheus); it must be cheap
// and must not call back into the batcher in a way that blocks.
type BatchObserver interface {
	ObserveBatch(ops int, cost uint64, wait time.Duration)
}

// RejectReason names why Enqueue refused an operation, for metrics.
type RejectReason int

// The reasons Enqueue refuses an operation, one per error it returns.
const (
	RejectNoOperation RejectReason = iota
	RejectNoWatcher
	RejectTooExpensive
	RejectTooManyAttempts
	RejectStopped
	RejectBufferFull
	RejectBufferNotAllocated
	RejectContext
	rejectReasons
)

var rejectNames = [rejectReasons]string{
	"no_operation", "no_watcher", "too_expensive", "too_many_attempts",
	"stopped", "buffer_full", "buffer_not_allocated", "context",
}

// String returns the reason in snake case, as used in metric labels.
func (r RejectReason) String() string {
	if r < 0 || r >= rejectReasons {
		return "unknown"
	}
	return rejectNames[r]
}

// AllRejectReasons lists every RejectReason, in order.
func AllRejectReasons() []RejectReason {
	out := make([]RejectReason, rejectReasons)
	for i := range out {
		out[i] = RejectReason(i)
	}
	return out
}

// reasonOf returns the reason Enqueue refused with err, and false for an
// error that is none of those Enqueue returns.
func reasonOf(err error) (RejectReason, bool) {
	switch {
	case errors.As(err, new(NoOperationError)):
		return RejectNoOperation, true
	case errors.As(err, new(NoWatcherError)):
		return RejectNoWatcher, true
	case errors.As(err, new(TooExpensiveError)):
		return RejectTooExpensive, true
	case errors.As(err, new(TooManyAttemptsError)):
		return RejectTooManyAttempts, true
	case errors.As(err, new(BatcherStoppedError)):
		return RejectStopped, true
	case errors.As(err, new(BufferFullError)):
		return RejectBufferFull, true
	case errors.As(err, new(BufferNotAllocated)):
		return RejectBufferNotAllocated, true
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return RejectContext, true
	}
	// Enqueue returns no other error today; one added later must get a
	// reason of its own rather than be counted as another.
	return 0, false
}

// counters are the batcher's running totals. The loop goroutine adds to
// them once per batch or event, never per operation; rejections are counted
// by the refused caller.
type counters struct {
	enqueued, released, cost, batches atomic.Uint64
	pauses, pausedNanos               atomic.Uint64
	auditPass, auditFail, auditSkip   atomic.Uint64
	rejected                          [rejectReasons]atomic.Uint64
	paused                            atomic.Bool
	lastRelease                       atomic.Int64 // unix nanoseconds; 0 when never
	fair                              fairCounters // under fair release only
}

// BatcherStats is a snapshot of a Batcher's counters and gauges, for health
// endpoints and metrics. Totals count from the batcher's creation.
type BatcherStats struct {
	Enqueued        uint64            // operations accepted
	Rejected        map[string]uint64 // operations refused, by RejectReason name
	Released        uint64            // operations handed to watchers
	CostReleased    uint64            // their total cost
	Batches         uint64            // batches handed to watchers
	Buffered        uint32            // OperationsInBuffer
	Target          uint32            // NeedsCapacity
	Inflight        uint32            // callbacks running
	Capacity        uint32            // the rate limiter's capacity; 0 without one
	MaxCapacity     uint32            // the rate limiter's maximum; 0 without one
	Paused          bool              // a pause is in force
	Pauses          uint64            // pauses started or lengthened
	PausedSeconds   float64           // total length of the pauses applied
	AuditPass       uint64            // audits by result
	AuditFail       uint64            //
	AuditSkip       uint64            //
	LastRelease     time.Time         // zero when nothing was released yet
	Running         bool              // started and not stopped
	RateLimited     bool              // a rate limiter is attached
	ConfiguredLimit uint32            // WithMaxConcurrentBatches; 0 means none
	CostRatio       float64           // actual ÷ estimated cost reported lately (ActualCoster); 1 when none

	// Under fair release (WithFairRelease) only, else nil: the releases by
	// priority class ("high", "low") and by watcher name (WithName; names
	// beyond MaxWatcherNames add up under OtherWatchers, unnamed watchers
	// count only in their class).
	Classes  map[string]ReleaseCount
	Watchers map[string]ReleaseCount
}

// Stats returns a snapshot of the batcher's counters. It is safe for
// concurrent use and cheap enough to call on every scrape.
func (b *Batcher) Stats() BatcherStats {
	c := &b.stats
	s := BatcherStats{
		Enqueued:        b.accepted(),
		Rejected:        make(map[string]uint64, rejectReasons),
		Released:        c.released.Load(),
		CostReleased:    c.cost.Load(),
		Batches:         c.batches.Load(),
		Buffered:        b.OperationsInBuffer(),
		Target:          b.NeedsCapacity(),
		Inflight:        b.Inflight(),
		Paused:          c.paused.Load(),
		Pauses:          c.pauses.Load(),
		PausedSeconds:   time.Duration(c.pausedNanos.Load()).Seconds(),
		AuditPass:       c.auditPass.Load(),
		AuditFail:       c.auditFail.Load(),
		AuditSkip:       c.auditSkip.Load(),
		Running:         b.state.Load() == stateRunning,
		ConfiguredLimit: b.cfg.maxConcurrent,
		CostRatio:       1,
	}
	if r := b.costRatio.Load(); r != 0 {
		s.CostRatio = float64(r) / ratioOne
	}
	if b.cfg.fair {
		s.Classes, s.Watchers = c.fair.snapshot()
	}
	for i := range c.rejected {
		s.Rejected[RejectReason(i).String()] = c.rejected[i].Load()
	}
	if ns := c.lastRelease.Load(); ns != 0 {
		s.LastRelease = time.Unix(0, ns)
	}
	if rl := b.cfg.limiter; rl != nil {
		s.RateLimited, s.Capacity, s.MaxCapacity = true, rl.Capacity(), rl.MaxCapacity()
	}
	return s
}

// WithFairRelease shares the capacity among the watchers that have batches
// ready instead of releasing batches in the order they were closed: one
// watcher's backlog no longer holds back the others. Within a priority class
// each watcher gets capacity in proportion to its weight (start-time fair
// queuing by cost); the low class gets capacity only while the high class
// has nothing ready, except for a guaranteed LowPriorityShare. Set weights,
// classes and names with Watcher.WithWeight, WithPriority and WithName, or
// implement FairWatcher. The rate is the same as without it; a batch of
// several operations may be split at a flush into pieces of a sixteenth of
// a flush interval's worth of capacity while other watchers wait. The
// default is off: release in order, as go-batcher v1.8.0 does. Stats then
// also counts releases per class and per watcher name.
func (b *Batcher) WithFairRelease() *Batcher {
	if b.configurable() {
		b.cfg.fair = true
	}
	return b
}

// WithObserver registers o to receive a call per released batch (see
// BatchObserver). The default is none.
func (b *Batcher) WithObserver(o BatchObserver) *Batcher {
	if b.configurable() {
		b.mu.Lock()
		b.cfg.observer = o
		b.restamp()
		b.mu.Unlock()
	}
	return b
}
