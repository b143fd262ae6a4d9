package batcher

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/costwise/batcher/internal/events"
	"github.com/google/uuid"
)

// IBatcher is the interface of a Batcher, kept for compatibility with
// go-batcher v1.8.0 and for users who mock the batcher in their own tests.
type IBatcher interface {
	WithRateLimiter(rl RateLimiter) IBatcher
	WithFlushInterval(val time.Duration) IBatcher
	WithCapacityInterval(val time.Duration) IBatcher
	WithAuditInterval(val time.Duration) IBatcher
	WithMaxOperationTime(val time.Duration) IBatcher
	WithPauseTime(val time.Duration) IBatcher
	WithErrorOnFullBuffer() IBatcher
	WithEmitBatch() IBatcher
	WithMaxConcurrentBatches(n uint32) IBatcher
	WithMaxPauseTime(val time.Duration) IBatcher
	Enqueue(op IOperation) error
	EnqueueContext(ctx context.Context, op IOperation) error
	Pause()
	Flush()
	OperationsInBuffer() uint32
	NeedsCapacity() uint32
	Inflight() uint32
	Start() error
	Stop()
	Shutdown(ctx context.Context) error
	AddListener(fn func(event string, val int, msg string, metadata interface{})) uuid.UUID
	RemoveListener(id uuid.UUID)
}

// Defaults of a new Batcher.
const (
	DefaultBufferSize       = 10000
	DefaultFlushInterval    = 100 * time.Millisecond
	DefaultCapacityInterval = 100 * time.Millisecond
	DefaultAuditInterval    = 10 * time.Second
	DefaultMaxOperationTime = time.Minute
	DefaultPauseTime        = 500 * time.Millisecond
)

// Lifecycle states of a Batcher.
const (
	stateNew int32 = iota
	stateRunning
	stateStopped
)

// config is set by the With methods before Start and only read afterwards.
type config struct {
	bufferSize       uint32
	limiter          RateLimiter
	flushInterval    time.Duration
	capacityInterval time.Duration
	auditInterval    time.Duration
	maxOperationTime time.Duration
	pauseTime        time.Duration
	maxPauseTime     time.Duration
	maxConcurrent    uint32
	errorOnFull      bool
	emitBatch        bool
	clock            Clock
	observer         BatchObserver
	fair             bool
	invalid          error // the first invalid setting, reported by Start
}

// Batcher buffers operations and releases them to their watchers in batches,
// no faster than its rate limiter's capacity allows. Make one per datastore
// with NewBatcher, configure it with the With methods, then Start it.
//
// All methods are safe for concurrent use. The With methods configure the
// batcher and must be called before Start; once it has started they change
// nothing. One goroutine, started by Start and ended by Stop, owns the
// buffered operations, the batches being formed, the credit and the timers;
// Enqueue hands operations to it through a short mutex-guarded queue.
type Batcher struct {
	cfg         config
	listeners   events.Registry
	undelivered eventQueue // the loop's events on their way to the notifier
	stats       counters

	state    atomic.Int32
	buffered atomic.Int64 // accepted operations not yet released
	target   atomic.Int64 // cost of accepted operations not yet done
	inflight atomic.Int64 // callbacks running
	waiters  atomic.Int32 // Enqueue calls waiting for room
	pauses   atomic.Int32 // Pause calls not yet applied by the loop
	refuse   atomic.Bool  // set by Stop and Shutdown: no more operations
	draining atomic.Bool  // set by the loop once a Shutdown asked it to drain

	costRatio atomic.Uint64 // actual ÷ estimated cost × ratioOne, published by the loop; 0 until known
	settled   settlements   // costs reported by callbacks, for the loop

	mu         sync.Mutex    // guards incoming, spaceCh and the stopped transition
	incoming   handover      // accepted, not yet taken by the loop
	spaceCh    chan struct{} // closed when room frees up; nil when nobody waits
	stampEpoch time.Time     // the origin of the hand-over's stamps, set before Start

	wake         chan struct{}      // new operations, finished callbacks
	flushReq     chan struct{}      // Flush
	pauseReq     chan struct{}      // Pause
	drainReq     chan chan struct{} // Shutdown: the loop closes the reply once drained
	closing      chan struct{}      // closed when no more operations are accepted
	stopReq      chan struct{}      // closed by Stop
	loopDone     chan struct{}      // closed when the loop has ended
	notifierDone chan struct{}      // closed when the notifier has ended

	stopOnce    sync.Once
	closingOnce sync.Once
}

// NewBatcher returns a Batcher with the default buffer of 10,000 operations
// and the other defaults: flush and capacity intervals of 100 ms, audit
// interval 10 s, maximum operation time 1 minute, pause time 500 ms, no rate
// limiter.
func NewBatcher() IBatcher {
	return NewBatcherWithBuffer(DefaultBufferSize)
}

// NewBatcherWithBuffer returns a Batcher whose buffer holds maxBufferSize
// accepted operations not yet released; the other settings are the defaults
// of NewBatcher. A size of zero makes Enqueue return BufferNotAllocated.
func NewBatcherWithBuffer(maxBufferSize uint32) IBatcher {
	return newBatcher(maxBufferSize)
}

func newBatcher(size uint32) *Batcher {
	return &Batcher{
		cfg: config{
			bufferSize:       size,
			flushInterval:    DefaultFlushInterval,
			capacityInterval: DefaultCapacityInterval,
			auditInterval:    DefaultAuditInterval,
			maxOperationTime: DefaultMaxOperationTime,
			pauseTime:        DefaultPauseTime,
			clock:            RealClock(),
		},
		incoming:     newHandover(size),
		undelivered:  eventQueue{notify: make(chan struct{}, 1)},
		wake:         make(chan struct{}, 1),
		flushReq:     make(chan struct{}, 1),
		pauseReq:     make(chan struct{}, 1),
		drainReq:     make(chan chan struct{}),
		closing:      make(chan struct{}),
		stopReq:      make(chan struct{}),
		loopDone:     make(chan struct{}),
		notifierDone: make(chan struct{}),
	}
}

// configurable reports whether the With methods may still change settings.
func (b *Batcher) configurable() bool { return b.state.Load() == stateNew }

// setDuration stores a positive duration setting, or records why not.
func (b *Batcher) setDuration(dst *time.Duration, name string, val time.Duration) IBatcher {
	if !b.configurable() {
		return b
	}
	if val <= 0 {
		if b.cfg.invalid == nil {
			b.cfg.invalid = InvalidSettingError{Setting: name, Value: val.String()}
		}
		return b
	}
	*dst = val
	return b
}

// WithRateLimiter makes the batcher release operations no faster than rl's
// capacity in cost per second. The default is no rate limiter: operations are
// released as fast as batches form. rl must be provisioned and started by the
// caller.
func (b *Batcher) WithRateLimiter(rl RateLimiter) IBatcher {
	if b.configurable() {
		b.cfg.limiter = rl
	}
	return b
}

// WithFlushInterval sets how long batchable operations may wait in a batch
// that is not full before it is released (default 100 ms). With a rate
// limiter it is also the span of the credit cap: idle time never banks more
// than one flush interval's worth of capacity.
func (b *Batcher) WithFlushInterval(val time.Duration) IBatcher {
	return b.setDuration(&b.cfg.flushInterval, "FlushInterval", val)
}

// WithCapacityInterval sets how often the batcher asks its rate limiter for
// the capacity it needs (GiveMe with the target) (default 100 ms).
func (b *Batcher) WithCapacityInterval(val time.Duration) IBatcher {
	return b.setDuration(&b.cfg.capacityInterval, "CapacityInterval", val)
}

// WithAuditInterval sets how often the target is audited (default 10 s).
func (b *Batcher) WithAuditInterval(val time.Duration) IBatcher {
	return b.setDuration(&b.cfg.auditInterval, "AuditInterval", val)
}

// WithMaxOperationTime sets how long a released batch may take before it is
// counted done anyway (default 1 minute). A watcher's own MaxOperationTime,
// when set, takes precedence.
func (b *Batcher) WithMaxOperationTime(val time.Duration) IBatcher {
	return b.setDuration(&b.cfg.maxOperationTime, "MaxOperationTime", val)
}

// WithPauseTime sets the length of the first pause (default 500 ms).
func (b *Batcher) WithPauseTime(val time.Duration) IBatcher {
	return b.setDuration(&b.cfg.pauseTime, "PauseTime", val)
}

// WithMaxPauseTime caps the length that repeated pauses can double up to
// (default 8 × the pause time).
func (b *Batcher) WithMaxPauseTime(val time.Duration) IBatcher {
	return b.setDuration(&b.cfg.maxPauseTime, "MaxPauseTime", val)
}

// WithErrorOnFullBuffer makes Enqueue return BufferFullError when the buffer
// is full instead of waiting for room.
func (b *Batcher) WithErrorOnFullBuffer() IBatcher {
	if b.configurable() {
		b.cfg.errorOnFull = true
	}
	return b
}

// WithEmitBatch raises a batch event for every batch released, with the
// operations as metadata. It is meant for tests: it slows the batcher and
// shows every watcher's operations to every listener.
func (b *Batcher) WithEmitBatch() IBatcher {
	if b.configurable() {
		b.cfg.emitBatch = true
	}
	return b
}

// WithMaxConcurrentBatches allows at most n watcher callbacks to run at once;
// further batches wait in the buffer. The default, 0, means no limit.
func (b *Batcher) WithMaxConcurrentBatches(n uint32) IBatcher {
	if b.configurable() {
		b.cfg.maxConcurrent = n
	}
	return b
}

// WithClock replaces the system clock, for tests that move time by hand (see
// package batchertest). It is an addition to the IBatcher interface; call it
// on the *Batcher returned by New.
func (b *Batcher) WithClock(c Clock) *Batcher {
	if b.configurable() && c != nil {
		b.mu.Lock()
		b.cfg.clock = c
		b.restamp() // stamps are read on the clock that made them
		b.mu.Unlock()
	}
	return b
}

// New returns a *Batcher with a buffer of maxBufferSize, for callers that
// want the methods beyond IBatcher, such as WithClock and Stats, without a
// type assertion.
func New(maxBufferSize uint32) *Batcher {
	return newBatcher(maxBufferSize)
}

// AddListener registers fn for the batcher's events and returns an id for
// RemoveListener. Listeners are called in event order, on a goroutine of
// their own (the loop never waits for them), never with a lock of the
// batcher held, so they may call any of its methods, Stop, Shutdown, a
// blocking Enqueue and RemoveListener on themselves included. A slow
// listener delays the events after it, not the release of batches.
func (b *Batcher) AddListener(fn Listener) uuid.UUID {
	return b.listeners.Add(fn)
}

// RemoveListener unregisters the listener with id; an unknown id is ignored.
func (b *Batcher) RemoveListener(id uuid.UUID) {
	b.listeners.Remove(id)
}

// OperationsInBuffer returns the number of accepted operations not yet
// released to a watcher, including those in batches still being formed.
func (b *Batcher) OperationsInBuffer() uint32 {
	return clampU32(b.buffered.Load())
}

// NeedsCapacity returns the target: the total cost of accepted operations
// whose batches are not done yet. When callbacks report actual costs (see
// ActualCoster), it is scaled by the ratio of actual to estimated cost
// observed lately, so the capacity asked for follows the real costs.
func (b *Batcher) NeedsCapacity() uint32 {
	return scaleTarget(b.target.Load(), b.costRatio.Load())
}

// Inflight returns the number of watcher callbacks running now.
func (b *Batcher) Inflight() uint32 {
	return clampU32(b.inflight.Load())
}

// Flush asks for an immediate flush of every batch being formed. It never
// blocks and releases nothing beyond the credit, so calling it often does
// not raise the rate.
func (b *Batcher) Flush() {
	select {
	case b.flushReq <- struct{}{}:
	default:
	}
}

// Pause suspends releases, capacity requests and audits for the pause time,
// doubling the length for repeated pauses (see WithMaxPauseTime). Call it when
// the datastore pushes back (429s, timeouts). It never blocks and is ignored
// unless the batcher is running.
func (b *Batcher) Pause() {
	if b.state.Load() != stateRunning {
		return
	}
	b.pauses.Add(1)
	select {
	case b.pauseReq <- struct{}{}:
	default:
	}
}

func clampU32(v int64) uint32 {
	switch {
	case v <= 0:
		return 0
	case v > int64(^uint32(0)):
		return ^uint32(0)
	}
	return uint32(v)
}
