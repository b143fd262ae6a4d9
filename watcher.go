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
