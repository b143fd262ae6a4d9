package batchertest

import (
	"context"
	"sync"
	"sync/atomic"
)

// Limiter is a batcher.RateLimiter whose capacity the test sets and which
// records every target asked of it. It is safe for concurrent use.
type Limiter struct {
	capacity    atomic.Uint32
	maxCapacity atomic.Uint32
	mu          sync.Mutex
	targets     []uint32
	started     atomic.Bool
	stopped     atomic.Bool

	// ProvisionErr and StartErr, when set before use, are returned by
	// Provision and Start.
	ProvisionErr, StartErr error
}

// NewLimiter returns a limiter whose Capacity and MaxCapacity are capacity.
func NewLimiter(capacity uint32) *Limiter {
	l := &Limiter{}
	l.capacity.Store(capacity)
	l.maxCapacity.Store(capacity)
	return l
}

// SetCapacity changes the capacity returned by Capacity.
func (l *Limiter) SetCapacity(c uint32) { l.capacity.Store(c) }

// SetMaxCapacity changes the value returned by MaxCapacity.
func (l *Limiter) SetMaxCapacity(c uint32) { l.maxCapacity.Store(c) }

// Provision returns ProvisionErr.
func (l *Limiter) Provision(ctx context.Context) error { return l.ProvisionErr }

// Start records the call and returns StartErr.
func (l *Limiter) Start(ctx context.Context) error {
	l.started.Store(true)
	return l.StartErr
}

// Stop records the call.
func (l *Limiter) Stop() { l.stopped.Store(true) }

// Started reports whether Start was called.
func (l *Limiter) Started() bool { return l.started.Load() }

// Stopped reports whether Stop was called.
func (l *Limiter) Stopped() bool { return l.stopped.Load() }

// MaxCapacity returns the value set by NewLimiter or SetMaxCapacity.
func (l *Limiter) MaxCapacity() uint32 { return l.maxCapacity.Load() }

// Capacity returns the value set by NewLimiter or SetCapacity.
func (l *Limiter) Capacity() uint32 { return l.capacity.Load() }

// GiveMe records target.
func (l *Limiter) GiveMe(target uint32) {
	l.mu.Lock()
	l.targets = append(l.targets, target)
	l.mu.Unlock()
}

// Targets returns every target asked so far, in order.
func (l *Limiter) Targets() []uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]uint32(nil), l.targets...)
}
