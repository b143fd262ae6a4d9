// Package adaptive provides a rate limiter that learns the capacity a
// service may really use from the datastore's throttling.
//
// The capacity a team provisions is often more than its batcher may use: other
// clients share the container (the service's own interactive requests, another
// service, an operator's query), and they take an amount nobody configured.
// Limiter wraps any rate limiter of this module (a ProvisionedResource, a
// SharedResource, an AzureSharedResource) and supplies a fraction of its
// capacity. Each time the datastore throttles (a 429 that the caller reports
// with Throttled, or the Batcher's pause, through Listener), the fraction is
// multiplied by the decrease factor; while no throttling comes, it grows back
// by a fixed step, never above the whole inner capacity. This is additive
// increase, multiplicative decrease (AIMD), the rule by which TCP shares a
// link among senders that cannot see each other: it converges to just under
// what is left by the other clients and follows it when it moves.
//
// With the defaults (decrease 0.9, increase 1 % of the inner capacity per
// second, one-second cooldown), a batcher that sends at the supplied capacity
// oscillates between 90 % and 100 % of the room the other clients leave, so it
// uses about 95 % of it on average, and it is throttled only briefly at the
// top of each cycle, about every ten seconds.
//
// Limiter is safe for concurrent use. It starts no goroutine: the fraction is
// brought up to date whenever Capacity is read.
package adaptive

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/costwise/batcher/internal/clock"
	"github.com/costwise/batcher/internal/errs"
	"github.com/costwise/batcher/internal/events"
	"github.com/google/uuid"
)

// RateLimiter is the interface of the limiter that Limiter wraps; it has the
// method set of batcher.RateLimiter, so every rate limiter of this module
// fits, and Limiter itself is one.
type RateLimiter interface {
	// Provision prepares whatever the limiter needs.
	Provision(ctx context.Context) error
	// MaxCapacity is the most capacity the limiter could ever supply.
	MaxCapacity() uint32
	// Capacity is the capacity the limiter holds now.
	Capacity() uint32
	// GiveMe tells the limiter how much capacity is wanted.
	GiveMe(target uint32)
	// Start begins whatever background work the limiter does.
	Start(ctx context.Context) error
	// Stop ends the limiter's background work.
	Stop()
}

// Defaults of a Limiter.
const (
	// DefaultDecrease is the factor the fraction is multiplied by on
	// throttling.
	DefaultDecrease = 0.9
	// DefaultIncrease is how much of the inner capacity the fraction regains
	// per second without throttling.
	DefaultIncrease = 0.01
	// DefaultMinFraction is the smallest fraction supplied, so that a limiter
	// that was throttled many times still probes for capacity.
	DefaultMinFraction = 0.05
	// DefaultCooldown is how long after a decrease further throttling is
	// taken as part of the same episode (requests in flight when the
	// datastore started throttling), and the fraction does not grow.
	DefaultCooldown = time.Second
	// DefaultStep is how often the fraction grows: the increase per second
	// is applied in steps of this length.
	DefaultStep = 250 * time.Millisecond
)

// Throttling reasons carried in the msg of a CapacityEvent.
const (
	// MsgThrottled is the msg of a capacity event raised by a decrease.
	MsgThrottled = "throttled"
	// MsgRecovering is the msg of a capacity event raised by an increase.
	MsgRecovering = "recovering"
)

// full is the fraction 1, in parts per million.
const full = 1_000_000

// Limiter supplies a fraction of an inner rate limiter's capacity that falls
// on throttling and grows back without it; see the package documentation.
type Limiter struct {
	inner RateLimiter

	// Settings, fixed by Provision.
	clock    clock.Clock
	decrease float64
	increase float64
	minFrac  float64
	cooldown time.Duration
	step     time.Duration
	invalid  *errs.InvalidSettingError
	frozen   atomic.Bool

	mu        sync.Mutex // guards the fields below
	frac      int64      // parts per million of the inner capacity
	lastStep  time.Time  // growth is counted in steps from here
	baseFrac  int64      // frac at lastStep: growth is computed from it, not added step by step
	calmUntil time.Time  // throttling before this is the same episode

	throttles  atomic.Int64 // Throttled calls
	decreases  atomic.Int64 // decreases made
	lastEmit   atomic.Int64 // last fraction a capacity event announced
	listeners  events.Registry
	stopped    atomic.Bool
	startedCap atomic.Bool
}

// New returns a Limiter over inner that supplies all of inner's capacity
// until it learns otherwise.
func New(inner RateLimiter) *Limiter {
	l := &Limiter{
		inner:    inner,
		clock:    clock.Real(),
		decrease: DefaultDecrease,
		increase: DefaultIncrease,
		minFrac:  DefaultMinFraction,
		cooldown: DefaultCooldown,
		step:     DefaultStep,
		frac:     full,
	}
	l.lastEmit.Store(full)
	return l
}

// WithClock sets the clock, for tests; the default is the system clock. It
// has no effect after Provision.
func (l *Limiter) WithClock(c clock.Clock) *Limiter {
	if !l.frozen.Load() && c != nil {
		l.clock = c
	}
	return l
}

// WithDecrease sets the factor, in (0, 1), the fraction is multiplied by on
// throttling (default 0.9). Provision reports any other value as an
// InvalidSettingError.
func (l *Limiter) WithDecrease(factor float64) *Limiter {
	if !l.frozen.Load() {
		if !(factor > 0 && factor < 1) {
			l.invalidate("Decrease", factor)
		} else {
			l.decrease = factor
		}
	}
	return l
}

// WithIncrease sets how much of the inner capacity, in (0, 1], the fraction
// regains per second without throttling (default 0.01). Provision reports any
// other value as an InvalidSettingError.
func (l *Limiter) WithIncrease(perSecond float64) *Limiter {
	if !l.frozen.Load() {
		if !(perSecond > 0 && perSecond <= 1) {
			l.invalidate("Increase", perSecond)
		} else {
			l.increase = perSecond
		}
	}
	return l
}

// WithMinFraction sets the smallest fraction of the inner capacity supplied,
// in (0, 1] (default 0.05). Provision reports any other value as an
// InvalidSettingError.
func (l *Limiter) WithMinFraction(f float64) *Limiter {
	if !l.frozen.Load() {
		if !(f > 0 && f <= 1) {
			l.invalidate("MinFraction", f)
		} else {
			l.minFrac = f
		}
	}
	return l
}

// WithCooldown sets how long after a decrease further throttling counts as
// the same episode and the fraction does not grow (default one second).
// Provision reports a negative value as an InvalidSettingError.
func (l *Limiter) WithCooldown(d time.Duration) *Limiter {
	if !l.frozen.Load() {
		if d < 0 {
			l.invalidate("Cooldown", d)
		} else {
			l.cooldown = d
		}
	}
	return l
}

// WithStep sets how often the fraction grows (default 250 ms); the increase
// per second is spread over the steps. Provision reports a non-positive value
// as an InvalidSettingError.
func (l *Limiter) WithStep(d time.Duration) *Limiter {
	if !l.frozen.Load() {
		if d <= 0 {
			l.invalidate("Step", d)
		} else {
			l.step = d
		}
	}
	return l
}

func (l *Limiter) invalidate(setting string, v any) {
	if l.invalid == nil {
		l.invalid = &errs.InvalidSettingError{Setting: setting, Value: fmt.Sprint(v)}
	}
}

// Provision checks the settings, returning an InvalidSettingError for the
// first invalid one, then provisions the inner limiter. With calls after it
// change nothing.
func (l *Limiter) Provision(ctx context.Context) error {
	l.frozen.Store(true)
	if l.invalid != nil {
		return *l.invalid
	}
	return l.inner.Provision(ctx)
}

// Start starts the inner limiter and raises a capacity event with the
// capacity supplied.
func (l *Limiter) Start(ctx context.Context) error {
	l.frozen.Store(true)
	if err := l.inner.Start(ctx); err != nil {
		return err
	}
	l.mu.Lock()
	l.lastStep, l.baseFrac = l.clock.Now(), l.frac
	l.mu.Unlock()
	l.startedCap.Store(true)
	l.listeners.Emit(events.CapacityEvent, int(l.Capacity()), "", nil)
	return nil
}

// Stop stops the inner limiter and raises the shutdown event on its first
// call; a listener may call Stop again.
func (l *Limiter) Stop() {
	if l.stopped.CompareAndSwap(false, true) {
		l.inner.Stop()
		l.listeners.Emit(events.ShutdownEvent, 0, "", nil)
	}
}

// MaxCapacity returns the inner limiter's MaxCapacity: an operation that the
// inner limiter could ever pay for is accepted, and waits while the supplied
// capacity is lower.
func (l *Limiter) MaxCapacity() uint32 { return l.inner.MaxCapacity() }

// GiveMe passes the target on to the inner limiter.
func (l *Limiter) GiveMe(target uint32) { l.inner.GiveMe(target) }

// Capacity returns the fraction of the inner limiter's capacity that is
// supplied now, rounded down. It never exceeds the inner capacity.
func (l *Limiter) Capacity() uint32 {
	frac := l.advance(l.clock.Now())
	return scale(l.inner.Capacity(), frac)
}

// Fraction returns the fraction of the inner capacity supplied now, in
// [MinFraction, 1].
func (l *Limiter) Fraction() float64 {
	return float64(l.advance(l.clock.Now())) / full
}

// Throttled reports that the datastore throttled a request (an HTTP 429, a
// gRPC ResourceExhausted). The first report of an episode lowers the
// fraction; reports within the cooldown after it, or within retryAfter when
// that is longer, belong to the same episode and change nothing.
func (l *Limiter) Throttled(retryAfter time.Duration) {
	l.throttles.Add(1)
	now := l.clock.Now()
	l.advance(now)
	l.mu.Lock()
	if now.Before(l.calmUntil) {
		l.mu.Unlock()
		return
	}
	minPPM := int64(math.Ceil(l.minFrac * full))
	l.frac = max(minPPM, int64(float64(l.frac)*l.decrease))
	l.calmUntil = now.Add(max(l.cooldown, retryAfter))
	l.lastStep, l.baseFrac = l.calmUntil, l.frac
	frac := l.frac
	l.mu.Unlock()
	l.decreases.Add(1)
	l.announce(frac, MsgThrottled)
}

// Listener returns an event listener for a Batcher (batcher.AddListener)
// that counts the batcher's pauses as throttling: code written for
// go-batcher reports a 429 with Batcher.Pause, and this turns that report
// into a decrease. The pause length is taken as the retry-after.
func (l *Limiter) Listener() func(event string, val int, msg string, metadata interface{}) {
	return func(event string, val int, msg string, metadata interface{}) {
		if event == events.PauseEvent {
			l.Throttled(time.Duration(val) * time.Millisecond)
		}
	}
}

// Stats returns how many throttling reports the limiter received and how
// many of them lowered the fraction.
func (l *Limiter) Stats() (throttles, decreases int64) {
	return l.throttles.Load(), l.decreases.Load()
}

// AddListener registers fn for the limiter's events and returns an id for
// RemoveListener. It raises a capacity event (val: the capacity supplied,
// msg: MsgThrottled or MsgRecovering) whenever the fraction changes, and a
// shutdown event at Stop. Listeners are called without any lock held.
func (l *Limiter) AddListener(fn func(event string, val int, msg string, metadata interface{})) uuid.UUID {
	return l.listeners.Add(fn)
}

// RemoveListener unregisters the listener with id.
func (l *Limiter) RemoveListener(id uuid.UUID) { l.listeners.Remove(id) }

// advance applies the growth steps due at now and returns the fraction.
func (l *Limiter) advance(now time.Time) int64 {
	l.mu.Lock()
	if l.lastStep.IsZero() {
		l.lastStep, l.baseFrac = now, l.frac
	}
	if l.frac >= full || !now.After(l.lastStep) {
		frac := l.frac
		l.mu.Unlock()
		return frac
	}
	steps := int64(now.Sub(l.lastStep) / l.step)
	if steps == 0 {
		frac := l.frac
		l.mu.Unlock()
		return frac
	}
	// The growth of all the steps since lastStep at once, in whole parts
	// per million: a step worth less than one part is not rounded up, so
	// the rate per second does not depend on the step.
	grown := l.baseFrac + int64(l.increase*full*(time.Duration(steps)*l.step).Seconds())
	if grown <= l.frac {
		frac := l.frac
		l.mu.Unlock()
		return frac
	}
	l.frac = min(full, grown)
	frac := l.frac
	l.mu.Unlock()
	l.announce(frac, MsgRecovering)
	return frac
}

// announce raises a capacity event for frac unless one was raised for it
// already. It must be called without l.mu held.
func (l *Limiter) announce(frac int64, msg string) {
	if !l.startedCap.Load() || l.lastEmit.Swap(frac) == frac {
		return
	}
	l.listeners.Emit(events.CapacityEvent, int(scale(l.inner.Capacity(), frac)), msg, nil)
}

// scale returns capacity × frac / full, rounded down.
func scale(capacity uint32, frac int64) uint32 {
	return uint32(uint64(capacity) * uint64(frac) / full)
}
