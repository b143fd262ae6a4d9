package batcher

import "time"

// IWatcher receives the batches of the operations enqueued for it.
type IWatcher interface {
	WithMaxAttempts(val uint32) IWatcher
	WithMaxBatchSize(val uint32) IWatcher
	WithMaxOperationTime(val time.Duration) IWatcher
	MaxAttempts() uint32
	MaxBatchSize() uint32
	MaxOperationTime() time.Duration
	ProcessBatch(ops []IOperation)
}

// Watcher is the IWatcher made by NewWatcher. Configure it with the With
// methods before enqueuing its first operation; after that it is read
// concurrently and must not change.
type Watcher struct {
	onReady          func(batch []IOperation)
	maxAttempts      uint32
	maxBatchSize     uint32
	maxOperationTime time.Duration
	weight           uint32
	priority         Priority
	name             string
}

// NewWatcher returns a watcher that hands each batch to onReady. onReady runs
// on a goroutine of its own for every batch, so it must be safe to call
// concurrently with itself.
func NewWatcher(onReady func(batch []IOperation)) IWatcher {
	return &Watcher{onReady: onReady}
}

// WithMaxAttempts limits how many times an operation of this watcher may be
// enqueued again after delivery: Enqueue returns TooManyAttemptsError once
// Attempt() reaches val. The default, 0, means no limit.
func (w *Watcher) WithMaxAttempts(val uint32) IWatcher {
	w.maxAttempts = val
	return w
}

// WithMaxBatchSize caps the number of operations in one batch. A batch that
// reaches the cap is released without waiting for the flush interval. The
// default, 0, means no cap: batchable operations are grouped until the next
// flush.
func (w *Watcher) WithMaxBatchSize(val uint32) IWatcher {
	w.maxBatchSize = val
	return w
}

// WithMaxOperationTime sets how long the batcher waits for this watcher's
// callback before it counts the batch done anyway and lowers its target. The
// default, 0, means the batcher's own MaxOperationTime applies.
func (w *Watcher) WithMaxOperationTime(val time.Duration) IWatcher {
	w.maxOperationTime = val
	return w
}

// MaxAttempts returns the attempt limit; 0 means none.
func (w *Watcher) MaxAttempts() uint32 { return w.maxAttempts }

// MaxBatchSize returns the batch size cap; 0 means none.
func (w *Watcher) MaxBatchSize() uint32 { return w.maxBatchSize }

// MaxOperationTime returns the watcher's operation time limit; 0 means the
// batcher's applies.
func (w *Watcher) MaxOperationTime() time.Duration { return w.maxOperationTime }

// ProcessBatch hands ops to the callback given to NewWatcher; a nil callback
// is ignored.
func (w *Watcher) ProcessBatch(ops []IOperation) {
	if w.onReady != nil {
		w.onReady(ops)
	}
}

// WithWeight sets the watcher's share of the capacity under fair release
// (see Batcher.WithFairRelease): among the watchers of one priority that
// have batches ready, each gets capacity in proportion to its weight. The
// default, 0, means 1. Without fair release the weight has no effect.
func (w *Watcher) WithWeight(val uint32) *Watcher {
	w.weight = val
	return w
}

// WithPriority sets the watcher's priority class under fair release (see
// Batcher.WithFairRelease). The default is PriorityHigh; a value above
// PriorityLow counts as PriorityLow. Without fair release the priority has
// no effect.
func (w *Watcher) WithPriority(val Priority) *Watcher {
	w.priority = val
	return w
}

// WithName names the watcher for the per-watcher release counters of fair
// release (Stats().Watchers, and the metrics of package metrics/prometheus).
// Watchers may share a name (one per tenant, say, for the many short-lived
// watchers of its requests); their releases then add up under it. The
// default, "", counts the watcher only in its priority class.
func (w *Watcher) WithName(val string) *Watcher {
	w.name = val
	return w
}

// Weight returns the weight under fair release: 1 unless WithWeight set
// another.
func (w *Watcher) Weight() uint32 { return max(w.weight, 1) }

// Priority returns the priority class under fair release.
func (w *Watcher) Priority() Priority { return min(w.priority, PriorityLow) }

// Name returns the name given by WithName, or "".
func (w *Watcher) Name() string { return w.name }
