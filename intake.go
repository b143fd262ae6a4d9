package batcher

import "time"

// intakeChunk is how many operations intake moves per lock of the hand-over.
const intakeChunk = 256

// intakeHold is how many operations the loop takes into batches per pass,
// and, in order, how many it holds at most while it is blocked.
const intakeHold = 1024

// intake routes the operations handed over by Enqueue into batches, at most
// intakeHold per pass; step then releases and comes back for the rest (see
// holdIntake), so that a long backlog is taken in chunks with releases
// decided in between, at the time they are made, and no pass of the loop
// grows with the backlog. At a flush (flushing) an unblocked loop in order
// takes everything, so that the flush closes every batch of what was
// enqueued before it.
//
// With an observer set, the hand-over stamps each operation with when
// Enqueue accepted it (see handover), and intake reads the clock before
// each take, so that the stamps it gives later pushes are never late; it
// tells the hand-over when it leaves operations there because it is
// blocked.
func (l *loop) intake(flushing bool) {
	l.heldBack = false
	stamping := l.cfg.observer != nil
	took := 0
	for {
		if l.holdIntake(flushing, took) {
			l.heldBack = true
			if stamping && l.blocked && !l.toldHeld {
				l.b.holdIncoming()
				l.toldHeld = true
			}
			return
		}
		var now time.Time
		if stamping {
			now = l.clock.Now()
		}
		n := l.b.takeIncoming(l.chunk[:], l.chunkAt[:], now)
		l.toldHeld = false
		if n == 0 {
			return
		}
		if !stamping {
			now = l.clock.Now()
		}
		l.intakeAt = now
		for i, op := range l.chunk[:n] {
			l.route(op, l.chunkAt[i])
		}
		l.routed += n
		took += n
		clear(l.chunk[:n])
	}
}

// holdIntake reports whether intake stops for this pass, having taken took
// operations in it. A pass takes at most intakeHold, except a flush's in
// order while the loop is not blocked (the head of the ready queue waits
// neither for credit nor for a callback to end).
//
// In order, a blocked loop also leaves in the hand-over everything beyond
// intakeHold operations held in batches, until it is unblocked: in batches
// they would wait just the same, and cost memory that the hand-over already
// holds for them, so a backlog at capacity 0 allocates nothing. Operations
// of zero cost beyond those held then wait too. Under fair release the loop
// takes everything, pass by pass, blocked or not, as a newcomer's operations
// must reach the fair queue to pass a backlog; there a backlog costs batch
// memory again.
func (l *loop) holdIntake(flushing bool, took int) bool {
	if took >= intakeHold && (!flushing || l.blocked || l.ready.isFair()) {
		return true
	}
	return l.blocked && l.routed >= intakeHold && !l.ready.isFair()
}

// releaseDeferred reports whether step leaves the release to a later pass:
// under fair release, while intake left operations in the hand-over, since
// they may be of watchers that the fair queue must see to share the credit
// among all those waiting. The next pass takes them; a flush releases
// whatever the loop holds, so operations arriving faster than the loop
// takes them delay releases by at most a flush interval.
func (l *loop) releaseDeferred() bool {
	return l.heldBack && l.ready.isFair()
}

// resumeIntake reports whether step should wake the loop again to take what
// intake left in the hand-over: after a release that unblocked the loop, or
// under fair release at every pass.
func (l *loop) resumeIntake() bool {
	return l.heldBack && (!l.blocked || l.ready.isFair())
}

// route puts op in its watcher's batch. A non-batchable op closes the batch
// being formed (so the watcher's operations keep their order) and goes
// alone. at is op's stamp from the hand-over, if it stamps (see since).
func (l *loop) route(op *Operation, at int64) {
	w := op.Watcher()
	var p *pending
	if l.lastJoined != nil && l.lastJoined.open && l.lastJoined.w == w {
		p = l.lastJoined // most runs of operations come from one watcher
	} else {
		p = l.open[w]
	}
	if !op.IsBatchable() {
		if p != nil {
			l.closeBatch(p)
		}
		l.enqueueReady(&pending{w: w, ops: []IOperation{op}, cost: uint64(op.Cost()), since: l.since(at)})
		return
	}
	max := w.MaxBatchSize()
	if p == nil {
		size := max
		if size == 0 || size > 1024 {
			size = 16
		}
		p = &pending{w: w, ops: make([]IOperation, 0, size), open: true, since: l.since(at)}
		l.open[w] = p
		l.openList = append(l.openList, p)
	}
	p.ops = append(p.ops, op)
	p.cost += uint64(op.Cost())
	l.lastJoined = p
	if max > 0 && uint32(len(p.ops)) >= max {
		l.closeBatch(p)
	}
}

// closeBatch moves a batch being formed to the ready queue.
func (l *loop) closeBatch(p *pending) {
	p.open = false
	delete(l.open, p.w)
	l.enqueueReady(p)
}

func (l *loop) enqueueReady(p *pending) { l.ready.push(p) }

// closeAll closes every batch being formed, oldest first.
func (l *loop) closeAll() {
	for _, p := range l.openList {
		if p.open {
			l.closeBatch(p)
		}
	}
	clear(l.openList)
	l.openList = l.openList[:0]
}

// since returns the time a batch starting with an operation stamped at
// counts its wait from: when Enqueue accepted it if the hand-over stamps
// (an observer is set), else this intake.
func (l *loop) since(at int64) time.Time {
	if l.cfg.observer != nil {
		return l.b.acceptedAt(at)
	}
	return l.intakeAt
}
