package batcher

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// How a SharedResource shares capacity
//
// The shared capacity is split into P = ceil(shared/factor) partitions. An
// instance may use one factor of capacity for each partition on which it
// holds an exclusive, expiring lease in the coordination store (the
// LeaseManager), plus its reserved capacity, which needs no lease.
//
// One goroutine per instance, the loop, owns the lease table; Capacity reads
// a view of it that the loop publishes. GiveMe turns the target into the
// number of partitions wanted, W = ceil((target-reserved)/factor) clamped to
// [0, P], and wakes the loop when W changes. A fall of W other than to zero
// is held for 2 x maxInterval, so a target that flaps with every batch does
// not make partitions change hands. Each pass of the loop:
//
//  1. Publishes W as this instance's demand: a rise just before its next
//     listing, a fall at once (zero withdraws the record), and otherwise as
//     a heartbeat every lease/3 with a ttl of one lease, so the record of an
//     instance that died lapses.
//  2. Renews each held lease once two thirds of it have passed.
//  3. When a listing is due, reads a snapshot (one round trip: which
//     partitions are free, leased or missing, and every live demand) and
//     computes the max-min fair share of the P partitions among the
//     demands, its own being W. Every instance computes the same shares from
//     the same demands (remainders go to owners in sorted order), so no
//     instance needs to talk to another. Its target is min(W, share); since
//     max-min fairness gives partitions nobody else wants to those who want
//     more, an instance alone gets all it asks for.
//  4. Releases the leases above its target at once, and tries, in parallel
//     (at most 8 at a time), as many partitions as it lacks among those the
//     snapshot shows free: first in its home range (the shares laid end to
//     end in owner order, disjoint between instances), then in an order
//     particular to it (rendezvous hashing), so instances rarely race.
//
// Listings come every maxInterval/2 to maxInterval (random) while the
// instance holds less than its target or something moved at its last
// listing (its holding, or any instance's demand), and every 1.5 to 2.5
// maxInterval once settled, so a change of demand anywhere is seen within about a
// second with the default maxInterval of 500 ms. A rise of W wakes the loop
// at once (listings at most every maxInterval/4), so one instance ramps
// from nothing to every partition in a single pass: one demand, one
// snapshot and P acquires, 8 at a time. An idle instance (W = 0, nothing
// held) makes no storage calls. At full contention with the defaults an
// instance settled on 5 partitions makes about 60 listings, 30 renewals and
// 12 heartbeats a minute (about 102 transactions, none failing once
// settled).
//
// Validity: a lease counts as capacity from the moment its acquire or renew
// returned success until the moment that request was sent + the lease
// duration - a margin of max(2 s, 10 %) (at most a quarter of the lease).
// Because the store started the lease no earlier than the request was sent,
// the instance stops counting it before the store could give it to another
// instance, however long the process stalls, provided the two clocks' rates
// differ by less than the margin over one lease. Capacity compares against
// the clock when it is called, so a lease is never counted after its
// deadline even when the loop is stalled. A lease whose renewal fails with a
// conflict is dropped at once; one whose renewal fails with an error stops
// counting at its deadline and is retried with back-off. Leases are
// removed from the view before they are released. The guarantee assumes the
// store keeps its leases: a store that loses its data loses them too, and
// an instance learns of it at its next listing or renewal.
//
// Faults: a storage error raises an error event and backs the loop off
// exponentially from maxInterval (with jitter, at most lease/4, so
// renewals still get tries); capacity falls to the reserved capacity plus
// the leases still valid. A store that lost its partitions (a
// PartitionMissingError, or missing partitions in a snapshot) is
// provisioned again without a restart.
//
// Stop releases every lease (it stops counting them first), withdraws the
// demand and waits for the loop, so other instances can take the partitions
// at once.

// Defaults of a SharedResource.
const (
	// DefaultLeaseDuration is the lease length a SharedResource asks for.
	DefaultLeaseDuration = 15 * time.Second
	// DefaultMaxInterval is the default WithMaxInterval, in milliseconds.
	DefaultMaxInterval = 500
)

// Lifecycle phases of a SharedResource.
const (
	phaseNew = iota
	phaseProvisioned
	phaseStarted
	phaseStopped
)

// SharedResource is a RateLimiter that shares a capacity among instances
// (processes, replicas) through exclusive expiring leases on partitions kept
// by a LeaseManager; the comment at the top of shared.go describes the
// algorithm. Configure it with the With* methods before
// Provision; they are not safe for concurrent use. Every other method is
// safe for concurrent use.
type SharedResource struct {
	mgr           LeaseManager
	clock         Clock
	random        func() float64 // used by the loop goroutine only
	owner         string
	factor        uint32
	maxInterval   time.Duration
	leaseDuration time.Duration

	shared      atomic.Uint32
	reserved    atomic.Uint32
	target      atomic.Uint32
	wanted      atomic.Int64 // partitions wanted as of the last GiveMe
	reprovision atomic.Bool  // set by SetSharedCapacity, cleared by the loop

	valid        atomic.Pointer[[]time.Time] // validity deadlines of held leases
	lastCapacity atomic.Int64                // last capacity raised in an event
	listeners    listeners
	stats        sharedCounters

	mu       sync.Mutex // guards phase, cancel and done
	phase    int
	cancel   context.CancelFunc
	done     chan struct{}
	wake     chan struct{} // buffered 1; a pending send means "look again"
	stopOnce sync.Once
}

// NewSharedResource returns a SharedResource that shares sharedCapacity
// through mgr, with a factor of 1, no reserved capacity, a max interval of
// 500 ms, leases of 15 s and a random owner id.
func NewSharedResource(mgr LeaseManager, sharedCapacity uint32) *SharedResource {
	r := &SharedResource{
		mgr:           mgr,
		clock:         RealClock(),
		random:        rand.Float64,
		owner:         uuid.NewString(),
		factor:        1,
		maxInterval:   DefaultMaxInterval * time.Millisecond,
		leaseDuration: DefaultLeaseDuration,
		wake:          make(chan struct{}, 1),
	}
	r.shared.Store(sharedCapacity)
	r.wanted.Store(-1)
	return r
}

// WithFactor sets how much capacity one partition is worth (default 1); the
// number of partitions is ceil(shared/factor). Zero is ignored.
func (r *SharedResource) WithFactor(factor uint32) *SharedResource {
	if factor > 0 {
		r.factor = factor
	}
	return r
}

// WithReservedCapacity sets capacity this instance always has, in addition
// to the partitions it holds (default 0).
func (r *SharedResource) WithReservedCapacity(capacity uint32) *SharedResource {
	r.reserved.Store(capacity)
	return r
}

// WithMaxInterval sets, in milliseconds, the longest wait between two
// looks at the store while this instance needs more partitions (default
// 500); settled instances look about twice as rarely. Zero is ignored.
func (r *SharedResource) WithMaxInterval(ms uint32) *SharedResource {
	if ms > 0 {
		r.maxInterval = time.Duration(ms) * time.Millisecond
	}
	return r
}

// WithLeaseDuration sets the length of the leases asked for (default 15 s).
// The store must accept it: Azure allows 15 to 60 s. Zero or less is
// ignored.
func (r *SharedResource) WithLeaseDuration(d time.Duration) *SharedResource {
	if d > 0 {
		r.leaseDuration = d
	}
	return r
}

// WithClock sets the clock for lease timing and the loop's timers (default
// the system clock); tests pass a fake one. Nil is ignored.
func (r *SharedResource) WithClock(c Clock) *SharedResource {
	if c != nil {
		r.clock = c
	}
	return r
}

// WithRand sets the source of the random jitter of the loop, a function
// returning numbers in [0, 1) (default math/rand/v2's Float64). Only the
// loop goroutine calls it, so it need not be safe for concurrent use. Nil is
// ignored.
func (r *SharedResource) WithRand(random func() float64) *SharedResource {
	if random != nil {
		r.random = random
	}
	return r
}

// WithOwner sets the id this instance uses as lease owner and demand key
// (default a random UUID). It must be unique among the instances sharing
// the store, and the store may restrict its form (Azure requires a UUID).
func (r *SharedResource) WithOwner(owner string) *SharedResource {
	if owner != "" {
		r.owner = owner
	}
	return r
}

// Owner returns the id this instance uses as lease owner.
func (r *SharedResource) Owner() string { return r.owner }

// AddListener registers fn for the resource's events and returns an id for
// RemoveListener. Listeners are called on the goroutine that raises the
// event, never with a lock held.
func (r *SharedResource) AddListener(fn func(event string, val int, msg string, metadata interface{})) uuid.UUID {
	return r.listeners.add(fn)
}

// RemoveListener unregisters the listener with id.
func (r *SharedResource) RemoveListener(id uuid.UUID) {
	r.listeners.remove(id)
}

// MaxCapacity returns the shared plus the reserved capacity, the most this
// instance could ever get.
func (r *SharedResource) MaxCapacity() uint32 {
	return r.shared.Load() + r.reserved.Load()
}

// Capacity returns the reserved capacity plus one factor for each partition
// whose lease is valid at the moment of the call.
func (r *SharedResource) Capacity() uint32 {
	return r.capacityAt(r.clock.Now())
}

// capacityAt returns the capacity as it is at now.
func (r *SharedResource) capacityAt(now time.Time) uint32 {
	held := 0
	if v := r.valid.Load(); v != nil {
		held = countValid(*v, now)
	}
	return uint32(held)*r.factor + r.reserved.Load()
}

// emitCapacity raises a capacity event for c when it differs from the last
// one raised, or always when always is set.
func (r *SharedResource) emitCapacity(c uint32, always bool) {
	if r.lastCapacity.Swap(int64(c)) == int64(c) && !always {
		return
	}
	r.listeners.emit(CapacityEvent, int(c), "", nil)
}

// partitionCount returns ceil(shared/factor).
func (r *SharedResource) partitionCount() int {
	s, f := uint64(r.shared.Load()), uint64(r.factor)
	return int((s + f - 1) / f)
}

// wantedFor returns how many partitions target needs beyond the reserved
// capacity, at most count.
func (r *SharedResource) wantedFor(target uint32, count int) int {
	reserved := r.reserved.Load()
	if target <= reserved {
		return 0
	}
	need := (uint64(target-reserved) + uint64(r.factor) - 1) / uint64(r.factor)
	return int(min(need, uint64(count)))
}

// GiveMe asks for target capacity. When the number of partitions it needs
// changes, it raises a target event (val: the partitions wanted) and wakes
// the loop.
func (r *SharedResource) GiveMe(target uint32) {
	r.target.Store(target)
	w := int64(r.wantedFor(target, r.partitionCount()))
	if r.wanted.Swap(w) == w {
		return
	}
	r.listeners.emit(TargetEvent, int(w), "", nil)
	r.poke()
}

// poke wakes the loop without blocking; a wake already pending is enough.
func (r *SharedResource) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// SetReservedCapacity changes the reserved capacity at run time and raises
// a capacity event.
func (r *SharedResource) SetReservedCapacity(capacity uint32) {
	r.reserved.Store(capacity)
	r.emitCapacity(r.Capacity(), true)
	r.GiveMe(r.target.Load())
}

// SetSharedCapacity changes the shared capacity at run time. When running,
// the loop provisions the partitions the new capacity adds and releases
// those beyond it. It raises a capacity event, and returns the errors
// Provision would for a capacity of zero or too many partitions.
func (r *SharedResource) SetSharedCapacity(capacity uint32) error {
	if err := r.checkCapacity(capacity); err != nil {
		return err
	}
	r.shared.Store(capacity)
	r.reprovision.Store(true)
	r.emitCapacity(r.Capacity(), true)
	r.GiveMe(r.target.Load())
	r.poke()
	return nil
}

// checkCapacity validates a shared capacity with the configured factor.
func (r *SharedResource) checkCapacity(capacity uint32) error {
	if capacity == 0 {
		return UndefinedSharedCapacityError{}
	}
	f := uint64(r.factor)
	if n := (uint64(capacity) + f - 1) / f; n > MaxPartitions {
		return PartitionsOutOfRangeError{MaxCapacity: capacity, Factor: r.factor, PartitionCount: int(n)}
	}
	return nil
}

// Provision creates the partitions in the store, raising the provisioning
// events the LeaseManager reports. It may be called more than once before
// Start, never after.
func (r *SharedResource) Provision(ctx context.Context) error {
	r.mu.Lock()
	phase := r.phase
	r.mu.Unlock()
	if phase > phaseProvisioned {
		return RateLimiterImproperOrderError{}
	}
	if r.mgr == nil {
		return UndefinedLeaseManagerError{}
	}
	if err := r.checkCapacity(r.shared.Load()); err != nil {
		return err
	}
	if err := r.provisionStore(ctx, r.partitionCount()); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.phase > phaseProvisioned {
		return RateLimiterImproperOrderError{}
	}
	r.phase = phaseProvisioned
	return nil
}

// provisionStore asks the LeaseManager for count partitions and forwards
// its reports as events.
func (r *SharedResource) provisionStore(ctx context.Context, count int) error {
	return r.stats.count(r.mgr.Provision(ctx, count, func(event string, val int, msg string) {
		r.listeners.emit(event, val, msg, nil)
	}))
}

// Start starts the loop that acquires capacity; it must follow Provision.
// Cancelling ctx ends the loop as Stop does, releasing the leases; Stop must
// still be called to raise the shutdown event.
func (r *SharedResource) Start(ctx context.Context) error {
	r.mu.Lock()
	if r.phase != phaseProvisioned {
		r.mu.Unlock()
		return RateLimiterImproperOrderError{}
	}
	loopCtx, cancel := context.WithCancel(ctx)
	r.phase, r.cancel, r.done = phaseStarted, cancel, make(chan struct{})
	r.mu.Unlock()
	r.emitCapacity(r.Capacity(), true)
	go r.run(loopCtx, r.done)
	return nil
}

// Stop ends the loop, releases every lease and withdraws this instance's
// demand, so other instances can take the partitions at once; it then
// raises a capacity event when capacity changed, and the shutdown event.
// Capacity afterwards is the reserved capacity. Stop is idempotent and
// returns once the loop has ended.
func (r *SharedResource) Stop() {
	r.stopOnce.Do(func() {
		r.mu.Lock()
		cancel, done := r.cancel, r.done
		r.phase = phaseStopped
		r.mu.Unlock()
		if cancel != nil {
			cancel()
			<-done
		}
		r.listeners.emit(ShutdownEvent, 0, "", nil)
	})
}
