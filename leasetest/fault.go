package leasetest

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/costwise/batcher/lease"
)

// FaultManager is a lease.Manager that wraps another one and injects the
// faults tests need: a store that fails every call (SetFailure), a store that
// is slow or frozen (SetDelay), answers lost after the store acted
// (SetLostAnswers), a store that loses its data (Swap to an empty one), and a count of the calls made (Calls), to measure storage
// transactions. It keeps such hooks off the production managers. It is safe
// for concurrent use.
type FaultManager struct {
	mu      sync.Mutex // guards inner, failure, delay and lost
	inner   lease.Manager
	failure error
	delay   func(ctx context.Context)
	lost    func(op string) error
	calls   atomic.Uint64
}

// NewFaultManager returns a FaultManager that passes every call on to m
// until told otherwise.
func NewFaultManager(m lease.Manager) *FaultManager {
	return &FaultManager{inner: m}
}

// SetFailure makes every later call fail with err, without reaching the
// wrapped manager, until it is called again with nil. It imitates an
// unreachable or throttling store.
func (f *FaultManager) SetFailure(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failure = err
}

// SetDelay makes every later call first call delay, until SetDelay is
// called again with nil; the failure set by SetFailure, if any, is read
// after delay returns. It imitates a slow or frozen store: delay may wait for
// the call's context, or advance a fake clock by the time the call would take
// (and clear the failure when the store answers again within that time).
func (f *FaultManager) SetDelay(delay func(ctx context.Context)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delay = delay
}

// SetLostAnswers makes every later call whose method is named op
// ("Acquire", "Renew", "RenewBatch", "Release", "PublishDemand",
// "Snapshot", "Provision") go through to the wrapped manager, which acts on
// it, and then return lost(op) instead of its answer when that is not nil,
// until SetLostAnswers is called again with nil. It imitates a call that the
// store carried out after its caller gave up on it: a go-redis call to a
// frozen server times out, and the server runs it when it resumes.
func (f *FaultManager) SetLostAnswers(lost func(op string) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lost = lost
}

// answer returns the error that replaces the answer to a call of op, or
// err when the answer is not lost.
func (f *FaultManager) answer(op string, err error) error {
	f.mu.Lock()
	lost := f.lost
	f.mu.Unlock()
	if lost != nil {
		if e := lost(op); e != nil {
			return e
		}
	}
	return err
}

// Swap makes later calls go to m. Swapping in an empty store imitates a
// store that lost its data (container deleted, emulator restarted): every
// partition, lease and demand record is gone.
func (f *FaultManager) Swap(m lease.Manager) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inner = m
}

// Calls returns how many calls were made, failed ones included.
func (f *FaultManager) Calls() uint64 { return f.calls.Load() }

// begin counts a call and returns the manager to pass it to, or the error it
// must fail with.
func (f *FaultManager) begin(ctx context.Context) (lease.Manager, error) {
	f.calls.Add(1)
	f.mu.Lock()
	delay := f.delay
	f.mu.Unlock()
	if delay != nil {
		delay(ctx)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inner, f.failure
}

// Provision passes the call on unless a failure is set.
func (f *FaultManager) Provision(ctx context.Context, count int, report func(event string, val int, msg string)) error {
	m, err := f.begin(ctx)
	if err != nil {
		return err
	}
	return f.answer("Provision", m.Provision(ctx, count, report))
}

// Snapshot passes the call on unless a failure is set.
func (f *FaultManager) Snapshot(ctx context.Context, count int) (lease.Snapshot, error) {
	m, err := f.begin(ctx)
	if err != nil {
		return lease.Snapshot{}, err
	}
	snap, err := m.Snapshot(ctx, count)
	if err = f.answer("Snapshot", err); err != nil {
		return lease.Snapshot{}, err
	}
	return snap, nil
}

// Acquire passes the call on unless a failure is set.
func (f *FaultManager) Acquire(ctx context.Context, partition int, owner string, d time.Duration) error {
	m, err := f.begin(ctx)
	if err != nil {
		return err
	}
	return f.answer("Acquire", m.Acquire(ctx, partition, owner, d))
}

// Renew passes the call on unless a failure is set.
func (f *FaultManager) Renew(ctx context.Context, partition int, owner string, d time.Duration) error {
	m, err := f.begin(ctx)
	if err != nil {
		return err
	}
	return f.answer("Renew", m.Renew(ctx, partition, owner, d))
}

// RenewBatch passes the call on unless a failure is set: as one call to a
// manager that is a lease.BatchRenewer, and otherwise as one Renew per
// partition. It makes a FaultManager a lease.BatchRenewer whatever it wraps.
func (f *FaultManager) RenewBatch(ctx context.Context, partitions []int, owner string, d time.Duration) ([]error, error) {
	m, err := f.begin(ctx)
	if err != nil {
		return nil, err
	}
	var results []error
	if b, ok := m.(lease.BatchRenewer); ok {
		results, err = b.RenewBatch(ctx, partitions, owner, d)
	} else {
		results = make([]error, len(partitions))
		for i, p := range partitions {
			results[i] = m.Renew(ctx, p, owner, d)
		}
	}
	if err = f.answer("RenewBatch", err); err != nil {
		return nil, err
	}
	return results, nil
}

// Release passes the call on unless a failure is set.
func (f *FaultManager) Release(ctx context.Context, partition int, owner string) error {
	m, err := f.begin(ctx)
	if err != nil {
		return err
	}
	return f.answer("Release", m.Release(ctx, partition, owner))
}

// PublishDemand passes the call on unless a failure is set.
func (f *FaultManager) PublishDemand(ctx context.Context, owner string, partitions uint32, ttl time.Duration) error {
	m, err := f.begin(ctx)
	if err != nil {
		return err
	}
	return f.answer("PublishDemand", m.PublishDemand(ctx, owner, partitions, ttl))
}
