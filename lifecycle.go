package batcher

import (
	"context"
	"fmt"
	"sync/atomic"
)

// Start checks the settings and starts the loop that forms and releases
// batches, asks the rate limiter for capacity and audits the target, and the
// notifier that calls the listeners. It returns InvalidSettingError for a
// bad With value, BatcherImproperOrderError when the batcher was started or
// stopped before, and BufferNotAllocated for a Batcher not made by a
// constructor (the zero value).
func (b *Batcher) Start() error {
	if !b.made() {
		return BufferNotAllocated{}
	}
	if err := b.cfg.invalid; err != nil && b.state.Load() == stateNew {
		return err
	}
	if !b.state.CompareAndSwap(stateNew, stateRunning) {
		return BatcherImproperOrderError{}
	}
	l := newLoop(b)
	go b.notifier()
	go l.run()
	return nil
}

// made reports whether b was made by a constructor; the zero value has no
// channels, and its methods do nothing or return BufferNotAllocated.
func (b *Batcher) made() bool { return b.wake != nil }

// Stop stops the loop and every timer, raises the shutdown event once (val:
// the operations left unreleased, which stay counted by OperationsInBuffer)
// and refuses further operations with BatcherStoppedError. It is idempotent.
// Watcher callbacks already running are not waited for; use Shutdown for a
// graceful stop.
//
// Stop returns once the loop has ended and the listeners have been called
// with every event, the shutdown event last. Called while a listener runs,
// Stop cannot tell whether that listener is the caller, or waits for it, so
// it first waits up to 100 ms for that listener to return: a caller outside
// the listeners finds it returned and waits for the delivery as usual; a
// caller inside one returns after the 100 ms without waiting for the
// delivery, which ends once its listener returns. A listener that runs for
// longer than 100 ms when Stop is called from outside is taken for the
// caller too. What counts is the moment of the call: a listener that the
// stop itself sets running (the shutdown event's) is waited for.
func (b *Batcher) Stop() {
	if !b.made() {
		return
	}
	// A caller inside a listener, or one a listener waits for, finds one
	// running now; a caller outside finds none, unless one is delivering
	// events raised before the call.
	seen := b.undelivered.delivered.Load()
	inListener := b.undelivered.busy.Load()
	neverStarted := false
	b.stopOnce.Do(func() {
		b.mu.Lock()
		b.refuse.Store(true)
		prev := b.state.Swap(stateStopped)
		b.mu.Unlock()
		b.closeIntake()
		if prev == stateRunning {
			close(b.stopReq)
			return
		}
		neverStarted = true
		close(b.loopDone)
		close(b.notifierDone)
	})
	if neverStarted {
		// Raised outside the Once: a shutdown listener may call Stop again.
		b.listeners.Emit(ShutdownEvent, int(b.OperationsInBuffer()), "", nil)
		return
	}
	<-b.loopDone // the loop never waits on a listener, so this ends
	if inListener {
		inListener = !b.undelivered.movedOn(seen, listenerGrace, b.notifierDone)
	}
	if !inListener {
		<-b.notifierDone
	}
}

// closeIntake wakes every Enqueue waiting for room so it can fail.
func (b *Batcher) closeIntake() {
	b.closingOnce.Do(func() { close(b.closing) })
}

// Shutdown stops the batcher gracefully: it refuses new operations at once,
// keeps releasing buffered operations within capacity (batches being formed
// are released without waiting for the flush interval), waits for running
// callbacks, then stops. It returns nil when every operation was released
// and every callback returned; otherwise a ShutdownIncompleteError that gives
// the number never released and wraps ctx.Err() (or the reason the wait ended).
// Either way the batcher is stopped when it returns. A listener may call it.
//
// Called from a watcher callback, Shutdown waits for that very callback, so
// it can only end at ctx's deadline (with a ShutdownIncompleteError wrapping
// context.DeadlineExceeded); give it a context with a deadline there.
func (b *Batcher) Shutdown(ctx context.Context) error {
	if !b.made() {
		return nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	b.mu.Lock()
	b.refuse.Store(true)
	b.mu.Unlock()
	b.closeIntake()
	var reason error
	if b.state.Load() != stateRunning {
		reason = BatcherImproperOrderError{}
	} else {
		reason = b.awaitDrain(ctx)
	}
	b.Stop()
	n := b.OperationsInBuffer()
	if reason == nil {
		return nil
	}
	if _, neverRan := reason.(BatcherImproperOrderError); neverRan && n == 0 {
		return nil
	}
	return ShutdownIncompleteError{Unreleased: n, Err: reason}
}

// awaitDrain asks the loop to drain and waits for its answer, for ctx, or
// for a concurrent Stop. The loop closes reply once nothing is buffered and
// no callback runs.
func (b *Batcher) awaitDrain(ctx context.Context) error {
	reply := make(chan struct{})
	select {
	case b.drainReq <- reply:
	case <-ctx.Done():
		return ctx.Err()
	case <-b.loopDone:
		return BatcherStoppedError{}
	}
	select {
	case <-reply:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-b.loopDone:
		return BatcherStoppedError{}
	}
}

// runBatch hands a batch to its watcher on the batch's own goroutine. A panic
// in the callback is reported as an error event, raised once the batch
// counts as done, so that a listener of it may call Shutdown.
func (b *Batcher) runBatch(w IWatcher, ops []IOperation, batch *inflightBatch) {
	finished := false
	defer func() {
		if !finished { // the callback called runtime.Goexit
			b.settle(ops)
			b.finishBatch(batch)
		}
	}()
	p, panicked := processBatch(w, ops)
	finished = true
	b.settle(ops)
	b.finishBatch(batch)
	if panicked {
		b.listeners.Emit(ErrorEvent, len(ops), fmt.Sprintf("batcher: watcher callback panicked: %v", p), ops)
	}
}

// processBatch calls the watcher's callback and recovers its panic.
func processBatch(w IWatcher, ops []IOperation) (p interface{}, panicked bool) {
	defer func() {
		if panicked {
			p = recover()
		}
	}()
	panicked = true
	w.ProcessBatch(ops)
	return nil, false
}

// settle hands the actual costs the batch's operations reported to the
// loop, and wakes it to apply them.
func (b *Batcher) settle(ops []IOperation) {
	if est, act := settleOps(ops); est != 0 || act != 0 {
		b.settled.add(est, act)
		b.poke()
	}
}

// finishBatch is called when a callback returns.
func (b *Batcher) finishBatch(batch *inflightBatch) {
	b.markDone(batch)
	b.inflight.Add(-1)
	if b.cfg.maxConcurrent > 0 || b.draining.Load() {
		b.poke()
	}
}

// markDone takes a batch's cost out of the target, once, whichever of its
// callback's return and its deadline comes first.
func (b *Batcher) markDone(batch *inflightBatch) {
	if batch.done.CompareAndSwap(false, true) {
		subFloor(&b.target, batch.cost)
	}
}

// subFloor subtracts v from a without going below zero: an audit may have
// reset the target while a batch was still counted in it.
func subFloor(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		next := cur - v
		if next < 0 {
			next = 0
		}
		if a.CompareAndSwap(cur, next) {
			return
		}
	}
}
