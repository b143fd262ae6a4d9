package sharing

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/costwise/batcher/internal/clock"
	"github.com/costwise/batcher/internal/events"
	"github.com/costwise/batcher/lease"

	"github.com/google/uuid"
)

// Defaults of a Resource.
const (
	// DefaultLeaseDuration is the lease length a Resource asks for.
	DefaultLeaseDuration = 15 * time.Second
	// DefaultMaxInterval is the default WithMaxInterval, in milliseconds.
	DefaultMaxInterval = 500
	// DefaultRotation is the default WithRotation: how long the extra
	// partitions of an uneven split stay with the same instances.
	DefaultRotation = 3 * time.Second
)

// Lifecycle phases of a Resource.
const (
	phaseNew = iota
	phaseProvisioned
	phaseStarted
	phaseStopped
)

// Resource is a RateLimiter that shares a capacity among instances
// (processes, replicas) through exclusive expiring leases on partitions kept
// by a lease.Manager; the package documentation describes the
// algorithm. Configure it with the With* methods before
// Provision; they are not safe for concurrent use. Every other method is
// safe for concurrent use.
type Resource struct {
	mgr           lease.Manager
	clock         clock.Clock
	random        func() float64 // used by the loop goroutine only
	owner         string
	factor        uint32
	maxInterval   time.Duration
	leaseDuration time.Duration
	rotation      time.Duration

	shared      atomic.Uint32
	reserved    atomic.Uint32
	target      atomic.Uint32
	wanted      atomic.Int64 // partitions wanted as of the last GiveMe
	reprovision atomic.Bool  // set by SetSharedCapacity, cleared by the loop

	valid        atomic.Pointer[[]validLease] // held leases and their validity deadlines
	lastCapacity atomic.Int64                 // last capacity raised in an event
	listeners    events.Registry
	stats        sharedCounters

	mu      sync.Mutex // guards phase, cancel and done
	phase   int
	invalid error // the first invalid With value, returned by Provision
	cancel  context.CancelFunc
	done    chan struct{}
	wake    chan struct{} // buffered 1; a pending send means "look again"
	stopped atomic.Bool   // set by Stop: Capacity is the reserved capacity

	emits      atomic.Uint64 // loop events raised so far
	inListener atomic.Uint64 // the loop event whose listeners run now; 0: none
}

// New returns a Resource that shares sharedCapacity
// through mgr, with a factor of 1, no reserved capacity, a max interval of
// 500 ms, leases of 15 s and a random owner id.
func New(mgr lease.Manager, sharedCapacity uint32) *Resource {
	r := &Resource{
		mgr:           mgr,
		clock:         clock.Real(),
		random:        rand.Float64,
		owner:         uuid.NewString(),
		factor:        1,
		maxInterval:   DefaultMaxInterval * time.Millisecond,
		leaseDuration: DefaultLeaseDuration,
		rotation:      DefaultRotation,
		wake:          make(chan struct{}, 1),
	}
	r.shared.Store(sharedCapacity)
	r.wanted.Store(-1)
	return r
}

// configurable reports whether the With methods may still change settings:
// only until Provision succeeds.
func (r *Resource) configurable() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.phase == phaseNew
}

// invalidSetting records the first value a With method could not use;
// Provision returns it.
func (r *Resource) invalidSetting(setting, value string) *Resource {
	if r.invalid == nil {
		r.invalid = InvalidSettingError{Setting: setting, Value: value}
	}
	return r
}

// WithFactor sets how much capacity one partition is worth (default 1); the
// number of partitions is ceil(shared/factor). Zero is kept out: Provision
// returns InvalidSettingError. Like every With method, it must be called
// before Provision; afterwards it changes nothing.
func (r *Resource) WithFactor(factor uint32) *Resource {
	if !r.configurable() {
		return r
	}
	if factor == 0 {
		return r.invalidSetting("Factor", "0")
	}
	r.factor = factor
	return r
}

// WithReservedCapacity sets capacity this instance always has, in addition
// to the partitions it holds (default 0). After Provision it changes
// nothing; SetReservedCapacity changes it at run time.
func (r *Resource) WithReservedCapacity(capacity uint32) *Resource {
	if r.configurable() {
		r.reserved.Store(capacity)
	}
	return r
}

// WithMaxInterval sets, in milliseconds, the longest wait between two
// looks at the store while this instance needs more partitions (default
// 500); settled instances look about twice as rarely. Zero makes Provision
// return InvalidSettingError.
func (r *Resource) WithMaxInterval(ms uint32) *Resource {
	if !r.configurable() {
		return r
	}
	if ms == 0 {
		return r.invalidSetting("MaxInterval", "0")
	}
	r.maxInterval = time.Duration(ms) * time.Millisecond
	return r
}

// WithLeaseDuration sets the length of the leases asked for (default 15 s).
// The store must accept it: Azure allows 15 to 60 s. Zero or less makes
// Provision return InvalidSettingError.
func (r *Resource) WithLeaseDuration(d time.Duration) *Resource {
	if !r.configurable() {
		return r
	}
	if d <= 0 {
		return r.invalidSetting("LeaseDuration", d.String())
	}
	r.leaseDuration = d
	return r
}

// WithRotation sets how long the partitions that do not divide evenly
// among the instances stay with the same ones (default 3 s). When P
// partitions are shared by instances that all want more than P/N, R = P mod
// N of them get one partition more than the others; with more instances
// than partitions, R = P and most instances get none. The extra partitions
// move on by one instance in owner order every period / R (at least 100 ms:
// when more than period / 100 ms partitions rotate, each stays longer), so
// that each instance keeps one for a period, the hand-overs are spread one
// at a time over the period, and over N/R periods each instance gets its
// fair share of capacity-seconds. A
// split whose shares are fair enough as they stand (Jain's index at least
// 0.99, nobody with nothing) keeps its extra partitions where they are. The
// boundaries are multiples of period / R since the Unix epoch by each
// instance's clock, so clocks should agree to within a few milliseconds
// (NTP); a difference only delays a hand-over, it never lets two instances
// count one partition. Each hand-over leaves a partition idle for a few
// milliseconds (the releasing instance's call, then the gaining instance's
// listing and acquire). Zero turns rotation off: the extra partitions stay
// with the first instances in owner order while the demands stay the same.
// A negative period makes Provision return InvalidSettingError.
func (r *Resource) WithRotation(period time.Duration) *Resource {
	if !r.configurable() {
		return r
	}
	if period < 0 {
		return r.invalidSetting("Rotation", period.String())
	}
	r.rotation = period
	return r
}

// minEpoch is the shortest rotation epoch: at most ten hand-overs a second.
const minEpoch = 100 * time.Millisecond

// epochLength returns the length of a rotation epoch when extras
// partitions rotate: the rotation period divided among them, so that each
// stays with an instance for one period and the hand-overs come one at a
// time, evenly spread, but no shorter than minEpoch. At the default 3 s and
// 20 partitions rotating that is 150 ms. Zero means no rotation.
func (r *Resource) epochLength(extras int) time.Duration {
	if r.rotation <= 0 || extras <= 0 {
		return 0
	}
	return max(r.rotation/time.Duration(extras), minEpoch)
}

// epochAt returns the rotation epoch that now falls in when extras
// partitions rotate: the number of whole epochs since the Unix epoch, or
// zero without rotation.
func (r *Resource) epochAt(now time.Time, extras int) uint64 {
	d := r.epochLength(extras)
	if d <= 0 {
		return 0
	}
	return uint64(now.UnixNano()) / uint64(d)
}

// epochStart returns when rotation epoch e begins when extras partitions
// rotate.
func (r *Resource) epochStart(e uint64, extras int) time.Time {
	return time.Unix(0, int64(e*uint64(r.epochLength(extras))))
}

// WithClock sets the clock for lease timing and the loop's timers (default
// the system clock); tests pass a fake one. Nil is ignored, as by the
// Batcher.
func (r *Resource) WithClock(c clock.Clock) *Resource {
	if r.configurable() && c != nil {
		r.clock = c
	}
	return r
}

// WithRand sets the source of the random jitter of the loop, a function
// returning numbers in [0, 1) (default math/rand/v2's Float64). Only the
// loop goroutine calls it, so it need not be safe for concurrent use. Nil is
// ignored.
func (r *Resource) WithRand(random func() float64) *Resource {
	if r.configurable() && random != nil {
		r.random = random
	}
	return r
}

// WithOwner sets the id this instance uses as lease owner and demand key
// (default a random UUID). It must be unique among the instances sharing
// the store, and the store may restrict its form (Azure requires a UUID).
// An empty owner makes Provision return InvalidSettingError.
func (r *Resource) WithOwner(owner string) *Resource {
	if !r.configurable() {
		return r
	}
	if owner == "" {
		return r.invalidSetting("Owner", `""`)
	}
	r.owner = owner
	return r
}

// Owner returns the id this instance uses as lease owner.
func (r *Resource) Owner() string { return r.owner }

// AddListener registers fn for the resource's events and returns an id for
// RemoveListener. Listeners are called on the goroutine that raises the
// event, never with a lock held.
func (r *Resource) AddListener(fn func(event string, val int, msg string, metadata interface{})) uuid.UUID {
	return r.listeners.Add(fn)
}

// RemoveListener unregisters the listener with id.
func (r *Resource) RemoveListener(id uuid.UUID) {
	r.listeners.Remove(id)
}

// MaxCapacity returns the shared plus the reserved capacity, the most this
// instance could ever get.
func (r *Resource) MaxCapacity() uint32 {
	return r.shared.Load() + r.reserved.Load()
}

// Capacity returns the reserved capacity plus what the partitions whose
// leases are valid at the moment of the call are worth: one factor each,
// except the last partition, which is worth only the remainder when the
// shared capacity is not a multiple of the factor. So the instances
// together never count more than the shared capacity, and Capacity never
// exceeds MaxCapacity.
func (r *Resource) Capacity() uint32 {
	return r.capacityAt(r.clock.Now())
}

// capacityAt returns the capacity as it is at now.
func (r *Resource) capacityAt(now time.Time) uint32 {
	_, held := r.heldAt(now)
	return held + r.reserved.Load()
}

// heldAt returns how many partitions count as capacity at now and what
// they are worth; nothing once Stop was called.
func (r *Resource) heldAt(now time.Time) (int, uint32) {
	v := r.valid.Load()
	if v == nil || r.stopped.Load() {
		return 0, 0
	}
	return tally(*v, now, r.shared.Load(), r.factor)
}

// emitCapacity raises a capacity event for c when it differs from the last
// one raised, or always when always is set. Not for the loop goroutine,
// which calls loopCapacity.
func (r *Resource) emitCapacity(c uint32, always bool) {
	if r.lastCapacity.Swap(int64(c)) == int64(c) && !always {
		return
	}
	r.listeners.Emit(CapacityEvent, int(c), "", nil)
}

// loopCapacity raises a capacity event for c when it differs from the last
// one raised. Loop goroutine only.
func (r *Resource) loopCapacity(c uint32) {
	if r.lastCapacity.Swap(int64(c)) == int64(c) {
		return
	}
	r.emitLoop(CapacityEvent, int(c), "", nil)
}

// emitLoop raises an event from the loop goroutine. While the listeners run
// it publishes the number of this call in inListener, so that Stop can tell
// that the loop may be waiting for its own caller. Loop goroutine only.
func (r *Resource) emitLoop(event string, val int, msg string, metadata interface{}) {
	r.inListener.Store(r.emits.Add(1))
	defer r.inListener.Store(0)
	r.listeners.Emit(event, val, msg, metadata)
}

// partitionCount returns ceil(shared/factor).
func (r *Resource) partitionCount() int {
	s, f := uint64(r.shared.Load()), uint64(r.factor)
	return int((s + f - 1) / f)
}

// wantedFor returns how many partitions target needs beyond the reserved
// capacity, at most count.
func (r *Resource) wantedFor(target uint32, count int) int {
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
func (r *Resource) GiveMe(target uint32) {
	r.target.Store(target)
	w := int64(r.wantedFor(target, r.partitionCount()))
	if r.wanted.Swap(w) == w {
		return
	}
	r.listeners.Emit(TargetEvent, int(w), "", nil)
	r.poke()
}

// poke wakes the loop without blocking; a wake already pending is enough.
func (r *Resource) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// SetReservedCapacity changes the reserved capacity at run time and raises
// a capacity event.
func (r *Resource) SetReservedCapacity(capacity uint32) {
	r.reserved.Store(capacity)
	r.emitCapacity(r.Capacity(), true)
	r.GiveMe(r.target.Load())
}

// SetSharedCapacity changes the shared capacity at run time. When running,
// the loop provisions the partitions the new capacity adds and releases
// those beyond it. It raises a capacity event, and returns the errors
// Provision would for a capacity of zero or too many partitions.
func (r *Resource) SetSharedCapacity(capacity uint32) error {
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
func (r *Resource) checkCapacity(capacity uint32) error {
	if capacity == 0 {
		return UndefinedSharedCapacityError{}
	}
	f := uint64(r.factor)
	if n := (uint64(capacity) + f - 1) / f; n > lease.MaxPartitions {
		return PartitionsOutOfRangeError{MaxCapacity: capacity, Factor: r.factor, PartitionCount: int(n)}
	}
	return nil
}

// Provision checks the settings, then creates the partitions in the store,
// raising the provisioning events the lease.Manager reports. It returns
// InvalidSettingError for a value a With method could not use, and
// UndefinedSharedCapacityError or PartitionsOutOfRangeError for the shared
// capacity. It may be called more than once before Start, never after; once
// it has been called the With methods change nothing.
func (r *Resource) Provision(ctx context.Context) error {
	r.mu.Lock()
	phase := r.phase
	r.mu.Unlock()
	if phase > phaseProvisioned {
		return RateLimiterImproperOrderError{}
	}
	if r.invalid != nil {
		return r.invalid
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

// provisionStore asks the lease.Manager for count partitions and forwards
// its reports as events.
func (r *Resource) provisionStore(ctx context.Context, count int) error {
	return r.stats.count(r.mgr.Provision(ctx, count, func(event string, val int, msg string) {
		r.listeners.Emit(event, val, msg, nil)
	}))
}

// Start starts the loop that acquires capacity; it must follow Provision.
// Cancelling ctx ends the loop as Stop does, releasing the leases; Stop must
// still be called to raise the shutdown event.
func (r *Resource) Start(ctx context.Context) error {
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

// HoldOwner is the owner of the hold, a demand record an instance publishes
// when it finds that the store lost its data (Redis restarted empty, the
// container deleted), before it provisions the partitions again. Other
// instances may still count leases the store forgot, until those leases'
// validity ends, at most one lease duration later. So, while the hold is
// live (its ttl is one lease duration), each instance re-takes exactly the
// partitions it still validly counts, and acquires no other: a partition
// nobody vouches for stays free until no lease can count it any more. The
// hold is no owner's demand, and does not enter fair shares. It is the nil
// UUID, which no instance's random owner id can be.
const HoldOwner = "00000000-0000-0000-0000-000000000000"

// StopTimeout is the longest Stop waits for the loop to release the leases
// and withdraw the demand.
const StopTimeout = releaseTimeout

// listenerGrace is how long Stop lets the loop stay inside one listener
// call before it takes that listener for its own caller.
const listenerGrace = 100 * time.Millisecond

// awaitLoop waits until done is closed, at most StopTimeout, and no longer
// once the loop has been inside one listener call for listenerGrace: no
// goroutine identity tells whether that listener is the caller of Stop, in
// which case the loop would wait for Stop as Stop waits for the loop. Wall
// time, not r.clock: the bound is a promise to the caller.
func (r *Resource) awaitLoop(done <-chan struct{}) {
	timeout := time.NewTimer(StopTimeout)
	defer timeout.Stop()
	poll := time.NewTicker(listenerGrace / 10)
	defer poll.Stop()
	var call uint64
	var since time.Time
	for {
		select {
		case <-done:
			return
		case <-timeout.C:
			return
		case now := <-poll.C:
			switch c := r.inListener.Load(); {
			case c == 0:
				call = 0
			case c != call:
				call, since = c, now
			case now.Sub(since) >= listenerGrace:
				return
			}
		}
	}
}

// Stop ends the loop, which releases every lease and withdraws this
// instance's demand so other instances can take the partitions at once;
// then it raises a capacity event when capacity changed, and the shutdown
// event. Capacity is the reserved capacity from the moment Stop is called.
//
// Stop returns within StopTimeout (2 s) whatever the store does. It waits
// for the loop until the releases are done or StopTimeout has passed; a
// store that does not answer in time is left to finish in the background,
// and the loop goroutine ends when the store's client gives up on its calls
// (its own timeouts: a call that ignores context cancellation, as go-redis
// does for a blocked read without ContextTimeoutEnabled, ends at its read
// timeout). Events of such a late release come after the shutdown event;
// leases it could not release expire at the store.
//
// Stop may be called from a listener, including one the loop is calling
// (allocated, released, failed, error, capacity): the loop cannot release
// while it waits for that listener, so when the loop has been inside one
// listener call for listenerGrace (100 ms) Stop stops waiting for it and
// the release follows in the background once the listener returns. Only the
// first call does anything; later calls, and calls before Start, return at
// once.
func (r *Resource) Stop() {
	r.mu.Lock()
	if r.phase == phaseStopped {
		r.mu.Unlock()
		return
	}
	cancel, done := r.cancel, r.done
	r.phase = phaseStopped
	r.mu.Unlock()
	r.stopped.Store(true)
	if cancel != nil {
		cancel()
		r.awaitLoop(done)
	}
	r.emitCapacity(r.reserved.Load(), false)
	r.listeners.Emit(ShutdownEvent, 0, "", nil)
}
