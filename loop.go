package batcher

import (
	"fmt"
	"time"
)

// loop is the state owned by a Batcher's loop goroutine: the batches being
// formed, the batches ready to go, the credit, the pause state and the
// timers. Nothing here is touched by any other goroutine.
type loop struct {
	b     *Batcher
	cfg   config
	clock Clock

	open       map[IWatcher]*pending   // the batch being formed, per watcher
	lastJoined *pending                // the batch the previous operation joined
	openList   []*pending              // batches opened since the last flush, in order
	ready      readyQueue              // closed batches in release order
	ratio      costRatio               // actual ÷ estimated cost of the settled operations
	chunk      [intakeChunk]*Operation // operations on their way from the hand-over
	chunkAt    [intakeChunk]int64      // when Enqueue accepted them, if the hand-over stamps
	routed     int                     // operations taken into batches, not yet released
	blocked    bool                    // the last release stopped with batches left
	heldBack   bool                    // intake left operations in the hand-over
	toldHeld   bool                    // the hand-over was told the loop leaves what it holds

	credit      credit
	capacity    uint32 // the limiter's capacity at the last release decision
	waitNeed    int64  // the balance the head of ready waits for (nano-cost)
	waiting     bool   // the head of ready waits for credit
	pause       pauser
	deadlines   deadlines
	lastRelease time.Time
	// auditAfter is when the last batch released stops counting for the
	// audit: its release plus the longer of the batcher's MaxOperationTime
	// and its watcher's, so that a target still held by a batch within its
	// watcher's longer MaxOperationTime is not taken for a leak.
	auditAfter time.Time
	draining   bool            // a Shutdown asked for a drain
	drainReply []chan struct{} // closed once drained, one per Shutdown

	intakeAt time.Time // when intake took the operations being routed

	flushTicker, capacityTicker, auditTicker Ticker
	dueTimer, pauseTimer                     Timer
	dueAt                                    time.Time // when dueTimer fires; zero when disarmed
}

// pending is a batch of one watcher's operations, being formed or ready.
type pending struct {
	w     IWatcher
	ops   []IOperation
	cost  uint64
	open  bool
	since time.Time // when Enqueue accepted its oldest operation (see handover)
}

func newLoop(b *Batcher) *loop {
	cfg := b.cfg
	if cfg.maxPauseTime == 0 {
		cfg.maxPauseTime = 8 * cfg.pauseTime
	}
	if cfg.maxPauseTime < cfg.pauseTime {
		cfg.maxPauseTime = cfg.pauseTime
	}
	c := cfg.clock
	l := &loop{
		b: b, cfg: cfg, clock: c,
		open:           make(map[IWatcher]*pending),
		pause:          pauser{base: cfg.pauseTime, max: cfg.maxPauseTime},
		flushTicker:    c.NewTicker(cfg.flushInterval),
		capacityTicker: c.NewTicker(cfg.capacityInterval),
		auditTicker:    c.NewTicker(cfg.auditInterval),
	}
	l.dueTimer = c.NewTimer(time.Hour)
	l.dueTimer.Stop()
	l.pauseTimer = c.NewTimer(time.Hour)
	l.pauseTimer.Stop()
	if cfg.limiter != nil {
		l.credit.fill(c.Now(), cfg.limiter.Capacity(), cfg.flushInterval)
	}
	l.ready = newReadyQueue(cfg.fair, &b.stats.fair)
	return l
}

// run is the loop goroutine: it waits for a signal and handles it, until
// Stop.
func (l *loop) run() {
	defer close(l.b.loopDone)
	l.step()
	for l.handle(l.wait()) {
	}
}

// step is run after every event: it takes new operations, releases what the
// credit allows, and re-arms the timer (arm also retires the batches past
// their deadline). The time of the release decision is read after the
// intake, which may take a while.
func (l *loop) step() {
	l.intake(false)
	if l.draining {
		l.closeAll()
	}
	now := l.clock.Now()
	if !l.releaseDeferred() {
		l.release(now, l.draining)
	}
	l.arm(now)
	if l.resumeIntake() {
		l.b.poke()
	}
	if len(l.drainReply) > 0 && l.b.buffered.Load() == 0 && l.b.inflight.Load() == 0 {
		l.applySettled() // what the last callbacks reported, before Shutdown returns
		for _, reply := range l.drainReply {
			close(reply)
		}
		l.drainReply = nil
	}
}

// drain answers a Shutdown: from now on every batch being formed is closed
// at once, and reply is closed when nothing is buffered and no callback runs.
func (l *loop) drain(reply chan struct{}) {
	l.draining = true
	l.b.draining.Store(true) // callbacks that finish now wake the loop
	l.drainReply = append(l.drainReply, reply)
}

// finish stops the timers and raises the shutdown event.
func (l *loop) finish() {
	l.flushTicker.Stop()
	l.capacityTicker.Stop()
	l.auditTicker.Stop()
	l.dueTimer.Stop()
	l.pauseTimer.Stop()
	l.intake(false)
	l.b.raise(ShutdownEvent, int(l.b.OperationsInBuffer()), "", nil)
}

// flush handles the flush interval and Flush: the batches being formed are
// closed, to go as soon as the credit allows.
func (l *loop) flush() {
	if l.pause.paused(l.clock.Now()) {
		return
	}
	l.intake(true)
	l.closeAll()
	l.release(l.clock.Now(), true)
}

// release hands ready batches to their watchers, in order, while the credit
// and the concurrency limit allow (see affordable); tick is true at a flush.
func (l *loop) release(now time.Time, tick bool) {
	waited := l.waiting
	l.waiting = false
	if l.pause.paused(now) {
		l.blocked = l.routed > 0
		return
	}
	defer func() { l.blocked = l.ready.len() > 0 }()
	limited := l.cfg.limiter != nil
	if limited {
		l.capacity = l.cfg.limiter.Capacity()
		l.credit.accrue(now, l.capacity, l.cfg.flushInterval, waited)
	}
	l.applySettled()
	for p := l.ready.front(); p != nil; p = l.ready.front() {
		if l.atConcurrencyLimit() {
			break
		}
		n := len(p.ops)
		if limited && n > 0 {
			n = l.affordable(p, tick)
		}
		if n == 0 && len(p.ops) > 0 {
			l.waiting = true
			l.releaseFree(now)
			break
		}
		if n > 0 {
			l.dispatch(p, n, now)
		}
		l.ready.done(p)
	}
	l.ready.compact()
}

// releaseFree lets batches of zero cost pass a head that waits for credit
// (see readyQueue.eachFree), while the concurrency limit allows: they need
// no credit, but each is a callback in flight.
func (l *loop) releaseFree(now time.Time) {
	l.ready.eachFree(func(p *pending) bool {
		if l.atConcurrencyLimit() {
			return false
		}
		l.dispatch(p, len(p.ops), now)
		return true
	})
}

// atConcurrencyLimit reports whether WithMaxConcurrentBatches' limit of
// callbacks in flight is reached.
func (l *loop) atConcurrencyLimit() bool {
	return l.cfg.maxConcurrent > 0 && l.b.inflight.Load() >= int64(l.cfg.maxConcurrent)
}

// applySettled takes the costs reported by the callbacks that returned
// since the last time (see ActualCoster): the credit is charged or refunded
// the difference, and the ratio that scales the target is updated.
func (l *loop) applySettled() {
	est, act := l.b.settled.take()
	if est == 0 && act == 0 {
		return
	}
	if l.cfg.limiter != nil {
		l.credit.settle(int64(min(act, 1<<40))-int64(min(est, 1<<40)), l.capacity, l.cfg.flushInterval)
	}
	l.ratio.observe(est, act, max(uint64(l.capacity), 1000))
	l.b.costRatio.Store(l.ratio.fixed())
}

// affordable spends credit on the head batch and returns how many of its
// operations may go now; waitNeed records the balance it waits for.
//
// Between flushes a single operation goes on any positive balance, and a
// batch of several only when the balance pays for all of it, so batches are
// not cut up. A batch costing more than the cap cannot be paid whole: it
// goes once the balance is at the cap, in the prefix that pays for, so that
// its release waits for credit, never for a flush (a batch going only at
// flushes would cap the rate at one such batch per interval, however much
// of its estimate the settlement refunds). At a flush (or while draining) a batch goes in the prefix the balance
// pays for, with a tolerance of a few milliseconds' worth of capacity below
// zero: the balance is often exactly zero at a tick, and without it timer
// jitter would decide between that tick and the next one, a whole interval
// later. The tolerance shifts when the debt is incurred, not how much, so
// the rate is unchanged. A batch of zero cost needs no credit. Under fair
// release with several watchers ready, a release takes at most a quantum's
// worth of the batch (see quantum), and between flushes waits for the
// credit of that prefix instead of the whole batch.
func (l *loop) affordable(p *pending, tick bool) int {
	if p.cost == 0 {
		return len(p.ops)
	}
	floor, quantum := int64(0), l.quantum()
	switch {
	case tick:
		floor = -satMul(uint64(l.capacity), uint64(min(l.cfg.flushInterval/10, 5*time.Millisecond)))
	case len(p.ops) > 1:
		need := int64(satMulU(prefixCost(p, quantum), uint64(nanoPerCost)))
		l.waitNeed = min(need, satMul(uint64(l.capacity), uint64(l.cfg.flushInterval)))
		if !l.credit.reaches(l.waitNeed) {
			return 0
		}
	}
	n, spent := 0, uint64(0)
	for _, op := range p.ops {
		if quantum > 0 && spent >= quantum || !l.credit.spendAbove(op.Cost(), floor) {
			break
		}
		n++
		spent += uint64(op.Cost())
	}
	if n == 0 {
		l.waitNeed = 1
	}
	return n
}

// dispatch releases the first n operations of p as one batch.
func (l *loop) dispatch(p *pending, n int, now time.Time) {
	ops, cost := l.ready.take(p, n)
	l.routed -= n
	thaw(ops)
	for _, op := range ops {
		op.MakeAttempt()
	}
	b := l.b
	b.buffered.Add(-int64(n))
	b.signalRoom()
	limit := p.w.MaxOperationTime()
	if limit <= 0 {
		limit = l.cfg.maxOperationTime
	}
	batch := &inflightBatch{cost: int64(cost), deadline: now.Add(limit)}
	l.deadlines.add(batch, int(b.inflight.Load()))
	b.inflight.Add(1)
	l.lastRelease = now
	if until := now.Add(max(limit, l.cfg.maxOperationTime)); until.After(l.auditAfter) {
		l.auditAfter = until
	}
	l.count(n, cost, now.Sub(p.since))
	if l.cfg.emitBatch {
		b.raise(BatchEvent, n, "", ops)
	}
	go b.runBatch(p.w, ops, batch)
}

// count records a released batch in the counters and the observer.
func (l *loop) count(n int, cost uint64, wait time.Duration) {
	c := &l.b.stats
	c.released.Add(uint64(n))
	c.cost.Add(cost)
	c.batches.Add(1)
	c.lastRelease.Store(l.lastRelease.UnixNano())
	if o := l.cfg.observer; o != nil {
		o.ObserveBatch(n, cost, wait)
	}
}

// arm retires the batches whose deadline has passed and sets the timer for
// the next moment something can happen without another event: the credit
// paying for the waiting batch, or the next deadline.
func (l *loop) arm(now time.Time) {
	var at time.Time
	if l.waiting && !l.pause.paused(now) {
		if t, ok := l.credit.readyAt(l.waitNeed, l.capacity, l.cfg.flushInterval); ok {
			at = t
		}
	}
	if t, ok := l.deadlines.expire(now, l.b.markDone); ok && (at.IsZero() || t.Before(at)) {
		at = t
	}
	if at.Equal(l.dueAt) {
		return
	}
	l.dueAt = at
	if at.IsZero() {
		l.dueTimer.Stop()
		return
	}
	d := at.Sub(now)
	if d <= 0 {
		d = time.Nanosecond
	}
	l.dueTimer.Reset(d)
}

// requestCapacity asks the rate limiter for the target.
func (l *loop) requestCapacity() {
	if l.cfg.limiter == nil || l.pause.paused(l.clock.Now()) {
		return
	}
	target := l.b.NeedsCapacity()
	l.cfg.limiter.GiveMe(target)
	l.b.raise(RequestEvent, int(target), "", nil)
}

// audit checks that the target is zero when nothing can be outstanding:
// the buffer is empty and the last release is older than the maximum
// operation time. A target above zero then is a leak, and it is reset.
func (l *loop) audit() {
	now := l.clock.Now()
	if l.pause.paused(now) {
		return
	}
	b := l.b
	recent := now.Before(l.auditAfter)
	if b.buffered.Load() > 0 || recent {
		b.stats.auditSkip.Add(1)
		b.raise(AuditSkipEvent, 0, "", nil)
		return
	}
	t := b.target.Load()
	if t <= 0 {
		b.stats.auditPass.Add(1)
		b.raise(AuditPassEvent, 0, "", nil)
		return
	}
	if !b.target.CompareAndSwap(t, 0) {
		b.stats.auditSkip.Add(1)
		b.raise(AuditSkipEvent, 0, "", nil)
		return
	}
	b.stats.auditFail.Add(1)
	msg := fmt.Sprintf("batcher: target was %d with nothing outstanding; it was reset to 0", t)
	b.raise(AuditFailEvent, int(clampU32(t)), msg, nil)
}

// applyPauses applies the Pause calls made since the last time.
func (l *loop) applyPauses() {
	n := l.b.pauses.Swap(0)
	for i := int32(0); i < n; i++ {
		// A pause whose time has come ended then, even if its timer is
		// still pending behind this Pause: end it first, so that the
		// Pause counts from that resume and the events keep their order.
		l.resume()
		now := l.clock.Now()
		before := l.pause.until
		length, extended := l.pause.pause(now)
		added := length
		if extended {
			added = l.pause.until.Sub(before)
		}
		l.b.stats.pauses.Add(1)
		l.b.stats.pausedNanos.Add(uint64(added))
		l.b.stats.paused.Store(true)
		l.pauseTimer.Reset(l.pause.until.Sub(now))
		l.b.raise(PauseEvent, int(length.Milliseconds()), "", nil)
	}
}

// resume ends a pause whose time has come.
func (l *loop) resume() {
	now := l.clock.Now()
	length, ok := l.pause.resume(now)
	if !ok {
		if l.pause.paused(now) {
			l.pauseTimer.Reset(l.pause.until.Sub(now))
		}
		return
	}
	l.b.stats.paused.Store(false)
	l.b.raise(ResumeEvent, int(length.Milliseconds()), "", nil)
}
