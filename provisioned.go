package batcher

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"
)

// ProvisionedResource is a RateLimiter with a fixed capacity per second that
// can be changed at run time with SetCapacity. Capacity and MaxCapacity are
// always equal. It needs no storage: Provision and Start do nothing but may
// be called for symmetry with the shared resources. It is safe for
// concurrent use.
type ProvisionedResource struct {
	capacity  atomic.Uint32
	listeners listeners
	setMu     sync.Mutex // orders SetCapacity calls so capacity events follow the stored value
	stopOnce  sync.Once
}

// NewProvisionedResource returns a rate limiter that supplies capacity cost
// units per second.
func NewProvisionedResource(capacity uint32) *ProvisionedResource {
	r := &ProvisionedResource{}
	r.capacity.Store(capacity)
	return r
}

// AddListener registers fn for the limiter's events (capacity, shutdown) and
// returns an id for RemoveListener.
func (r *ProvisionedResource) AddListener(fn func(event string, val int, msg string, metadata interface{})) uuid.UUID {
	return r.listeners.add(fn)
}

// RemoveListener unregisters the listener with id.
func (r *ProvisionedResource) RemoveListener(id uuid.UUID) {
	r.listeners.remove(id)
}

// Provision does nothing and returns nil.
func (r *ProvisionedResource) Provision(ctx context.Context) error { return nil }

// Start raises a capacity event with the capacity and returns nil.
func (r *ProvisionedResource) Start(ctx context.Context) error {
	r.listeners.emit(CapacityEvent, int(r.capacity.Load()), "", nil)
	return nil
}

// Stop raises the shutdown event once; the capacity stays readable.
func (r *ProvisionedResource) Stop() {
	r.stopOnce.Do(func() { r.listeners.emit(ShutdownEvent, 0, "", nil) })
}

// MaxCapacity returns the provisioned capacity.
func (r *ProvisionedResource) MaxCapacity() uint32 { return r.capacity.Load() }

// Capacity returns the provisioned capacity.
func (r *ProvisionedResource) Capacity() uint32 { return r.capacity.Load() }

// GiveMe does nothing: the capacity of a ProvisionedResource does not depend
// on demand.
func (r *ProvisionedResource) GiveMe(target uint32) {}

// SetCapacity changes both Capacity and MaxCapacity to capacity and raises a
// capacity event when the value changed. A Batcher using this limiter sees the
// new rate from its next release decision on.
func (r *ProvisionedResource) SetCapacity(capacity uint32) {
	r.setMu.Lock()
	old := r.capacity.Swap(capacity)
	r.setMu.Unlock()
	if old != capacity {
		r.listeners.emit(CapacityEvent, int(capacity), "", nil)
	}
}
