package batcher

import (
	"context"
	"reflect"
	"time"
)

// Enqueue adds op to the buffer. An operation of a type other than
// *Operation is read once, here: the watcher, cost and batchability it
// gives now are the ones used until it is released, whatever its methods
// answer later. It checks, in this order, and changes
// nothing when it refuses: op is nil (NoOperationError); op has no watcher
// (NoWatcherError); op costs more than the rate limiter's MaxCapacity
// (TooExpensiveError); op reached its watcher's MaxAttempts
// (TooManyAttemptsError); the batcher is stopped (BatcherStoppedError); the
// buffer is full (BufferFullError with WithErrorOnFullBuffer, otherwise
// Enqueue waits for room). Operations may be enqueued before Start.
func (b *Batcher) Enqueue(op IOperation) error {
	return b.counted(b.enqueue(context.Background(), op))
}

// EnqueueContext is Enqueue that gives up waiting for room in a full buffer
// when ctx ends, returning ctx.Err() unchanged.
func (b *Batcher) EnqueueContext(ctx context.Context, op IOperation) error {
	if ctx == nil {
		ctx = context.Background()
	}
	return b.counted(b.enqueue(ctx, op))
}

// counted records a refusal by its reason; an error of no known reason is
// not counted.
func (b *Batcher) counted(err error) error {
	if err != nil {
		if r, ok := reasonOf(err); ok {
			b.stats.rejected[r].Add(1)
		}
	}
	return err
}

func (b *Batcher) enqueue(ctx context.Context, custom IOperation) error {
	op := freeze(custom) // what is checked is what the loop will use
	if err := b.validate(op); err != nil {
		return err
	}
	if b.refuse.Load() {
		return BatcherStoppedError{}
	}
	if !b.reserve() {
		if err := b.waitForRoom(ctx); err != nil {
			return err
		}
	}
	b.mu.Lock()
	if b.refuse.Load() {
		b.mu.Unlock()
		b.buffered.Add(-1)
		return BatcherStoppedError{}
	}
	b.target.Add(int64(op.Cost()))
	var now int64
	if b.incoming.needsClock() {
		now = b.stamp(b.cfg.clock.Now())
	}
	first := b.incoming.push(op, now)
	b.mu.Unlock()
	if first {
		// The loop takes the whole queue when it wakes, so one wake-up per
		// batch of hand-overs is enough; this keeps Enqueue off the channel.
		b.poke()
	}
	return nil
}

// validate applies the checks that do not depend on the buffer.
func (b *Batcher) validate(op *Operation) error {
	if op == nil {
		return NoOperationError{}
	}
	w := op.Watcher()
	if w == nil {
		return NoWatcherError{}
	}
	if x, ok := w.(*Watcher); ok && x == nil {
		return NoWatcherError{}
	}
	if v := reflect.ValueOf(w); v.Kind() == reflect.Pointer && v.IsNil() {
		return NoWatcherError{} // a typed nil of the caller's own IWatcher
	}
	if rl := b.cfg.limiter; rl != nil && op.Cost() > rl.MaxCapacity() {
		return TooExpensiveError{}
	}
	if max := w.MaxAttempts(); max > 0 && op.original().Attempt() >= max {
		return TooManyAttemptsError{}
	}
	return nil
}

// reserve takes a slot in the buffer if one is free.
func (b *Batcher) reserve() bool {
	limit := int64(b.cfg.bufferSize)
	for {
		n := b.buffered.Load()
		if n >= limit {
			return false
		}
		if b.buffered.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// waitForRoom blocks until a slot is reserved, or says why it cannot be.
func (b *Batcher) waitForRoom(ctx context.Context) error {
	if b.cfg.bufferSize == 0 {
		return BufferNotAllocated{}
	}
	if b.cfg.errorOnFull {
		return BufferFullError{}
	}
	done := ctx.Done() // nil for Background: wait as long as it takes
	b.waiters.Add(1)
	defer b.waiters.Add(-1)
	for {
		ch := b.roomSignal()
		if b.reserve() {
			return nil
		}
		select {
		case <-ch:
		case <-done:
			return ctx.Err()
		case <-b.closing:
			return BatcherStoppedError{}
		}
	}
}

// roomSignal returns a channel that is closed the next time room frees up.
func (b *Batcher) roomSignal() chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.spaceCh == nil {
		b.spaceCh = make(chan struct{})
	}
	return b.spaceCh
}

// signalRoom wakes every Enqueue waiting for room.
func (b *Batcher) signalRoom() {
	if b.waiters.Load() == 0 {
		return
	}
	b.mu.Lock()
	if b.spaceCh != nil {
		close(b.spaceCh)
		b.spaceCh = nil
	}
	b.mu.Unlock()
}

// poke wakes the loop without blocking; a pending wake-up already covers it.
func (b *Batcher) poke() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// takeIncoming moves up to len(dst) operations handed over by Enqueue into
// dst and returns how many it moved. When the hand-over stamps them, it puts
// their stamps in dstAt (see acceptedAt), and now, read before the call,
// becomes the stamp of the operations pushed next. Loop goroutine only.
func (b *Batcher) takeIncoming(dst []*Operation, dstAt []int64, now time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var at int64
	if b.incoming.stamping() {
		at = b.stamp(now)
	}
	n := b.incoming.take(dst, dstAt, at)
	b.stats.enqueued.Add(uint64(n)) // under mu, for accepted()
	return n
}

// holdIncoming tells the hand-over that the loop leaves what it holds until
// it is unblocked, so that every operation pushed meanwhile is stamped with
// a reading of the clock. Loop goroutine only.
func (b *Batcher) holdIncoming() {
	b.mu.Lock()
	b.incoming.hold()
	b.mu.Unlock()
}

// stamp and acceptedAt convert between the batcher's time and the
// hand-over's stamps.
func (b *Batcher) stamp(t time.Time) int64 { return int64(t.Sub(b.stampEpoch)) }

func (b *Batcher) acceptedAt(at int64) time.Time {
	return b.stampEpoch.Add(time.Duration(at))
}

// restamp makes the hand-over record when Enqueue accepts each operation if
// and only if an observer is set, from now on the batcher's clock. Before
// Start only, with mu held.
func (b *Batcher) restamp() {
	b.stampEpoch = b.cfg.clock.Now()
	b.incoming.stamp(b.cfg.observer != nil, 0)
}

// accepted returns how many operations Enqueue has accepted: those the loop
// took and those still in the hand-over.
func (b *Batcher) accepted() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats.enqueued.Load() + uint64(b.incoming.len())
}
