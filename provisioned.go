package batcher

import (
	"context"
	"sync/atomic"

	"github.com/costwise/batcher/internal/events"
	"github.com/google/uuid"
)

// ProvisionedResource is a RateLimiter with a fixed capacity per second that
// can be changed at run time with SetCapacity. It needs no storage: Provision
// and Start do nothing but may be called for symmetry with the shared
// resources. It is safe for concurrent use, and its listeners may call any of
// its methods, Stop included.
//
// MaxCapacity is the largest capacity the resource has had: the one it was
// created with or a larger one set since. Lowering the capacity, to zero
// included, therefore does not make a Batcher refuse operations that fitted
// before: they are buffered and wait until capacity returns.
type ProvisionedResource struct {
	capacity  atomic.Uint32
	max       atomic.Uint32
	listeners events.Registry
	stopped   atomic.Bool
}

// NewProvisionedResource returns a rate limiter that supplies capacity cost
// units per second.
func NewProvisionedResource(capacity uint32) *ProvisionedResource {
	r := &ProvisionedResource{}
	r.capacity.Store(capacity)
	r.max.Store(capacity)
	return r
}

// AddListener registers fn for the limiter's events (capacity, shutdown) and
// returns an id for RemoveListener.
func (r *ProvisionedResource) AddListener(fn func(event string, val int, msg string, metadata interface{})) uuid.UUID {
	return r.listeners.Add(fn)
}

// RemoveListener unregisters the listener with id.
func (r *ProvisionedResource) RemoveListener(id uuid.UUID) {
	r.listeners.Remove(id)
}

// Provision does nothing and returns nil.
func (r *ProvisionedResource) Provision(ctx context.Context) error { return nil }

// Start raises a capacity event with the capacity and returns nil.
func (r *ProvisionedResource) Start(ctx context.Context) error {
	r.listeners.Emit(CapacityEvent, int(r.capacity.Load()), "", nil)
	return nil
}

// Stop raises the shutdown event on its first call; later calls, from a
// shutdown listener too, return at once. The capacity stays readable.
func (r *ProvisionedResource) Stop() {
	if r.stopped.CompareAndSwap(false, true) {
		r.listeners.Emit(ShutdownEvent, 0, "", nil)
	}
}

// MaxCapacity returns the largest capacity the resource has had: the one it
// was created with, or a larger one given to SetCapacity since.
func (r *ProvisionedResource) MaxCapacity() uint32 { return r.max.Load() }

// Capacity returns the current capacity.
func (r *ProvisionedResource) Capacity() uint32 { return r.capacity.Load() }

// GiveMe does nothing: the capacity of a ProvisionedResource does not depend
// on demand.
func (r *ProvisionedResource) GiveMe(target uint32) {}

// SetCapacity changes the capacity, raising MaxCapacity when capacity is
// larger, and raises a capacity event when the value changed. Zero stops
// releases of positive cost until a later SetCapacity; operations already
// buffered wait, and new ones that fit MaxCapacity are still accepted. A
// Batcher using this limiter sees the new rate from its next release
// decision on. The events of concurrent SetCapacity calls may arrive in any
// order; Capacity always returns the value stored last.
func (r *ProvisionedResource) SetCapacity(capacity uint32) {
	old := r.capacity.Swap(capacity)
	for {
		m := r.max.Load()
		if capacity <= m || r.max.CompareAndSwap(m, capacity) {
			break
		}
	}
	if old != capacity {
		r.listeners.Emit(CapacityEvent, int(capacity), "", nil)
	}
}
