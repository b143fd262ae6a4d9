package batcher

// readyQueue holds the closed batches of a Batcher in release order: in the
// order they were closed, or under fair release in the order of the fair
// queue (see fairQueue). It counts the ready batches of zero cost, which
// need no credit and so may pass a head that waits for it.
//
// It is owned by the batcher's loop goroutine.
type readyQueue struct {
	fifo []*pending // ready batches in closing order, from head; unused under fair release
	head int
	free int        // ready batches of zero cost
	fair *fairQueue // nil unless fair release is on
}

// newReadyQueue returns an empty queue, ordered by the fair queue when fair
// is true, which then counts its releases in stats.
func newReadyQueue(fair bool, stats *fairCounters) readyQueue {
	if fair {
		return readyQueue{fair: newFairQueue(stats)}
	}
	return readyQueue{}
}

// isFair reports whether the queue is ordered by fair release.
func (q *readyQueue) isFair() bool { return q.fair != nil }

// push adds a closed batch.
func (q *readyQueue) push(p *pending) {
	if p.cost == 0 {
		q.free++
	}
	if q.fair != nil {
		q.fair.push(p)
		return
	}
	q.fifo = append(q.fifo, p)
}

// front returns the batch to release next, or nil when none is ready. In
// closing order it may be a batch already emptied by releaseFree, which
// done then removes.
func (q *readyQueue) front() *pending {
	if q.fair != nil {
		return q.fair.front()
	}
	if q.head < len(q.fifo) {
		return q.fifo[q.head]
	}
	return nil
}

// len returns the number of batches in the queue.
func (q *readyQueue) len() int {
	if q.fair != nil {
		return q.fair.len()
	}
	return len(q.fifo) - q.head
}

// watchers returns the number of watchers with batches ready under fair
// release, and 0 without it.
func (q *readyQueue) watchers() int {
	if q.fair == nil {
		return 0
	}
	return q.fair.active()
}

// take removes the first n operations of p, a ready batch, and returns
// them with their cost. The fair queue drops p once it is empty; in closing
// order done does, when the release reaches it.
func (q *readyQueue) take(p *pending, n int) ([]IOperation, uint64) {
	ops := p.ops[:n:n]
	cost := p.cost
	if n < len(p.ops) {
		cost = 0
		for _, op := range ops {
			cost += uint64(op.Cost())
		}
	}
	if p.cost == 0 {
		q.free--
	}
	p.ops = p.ops[n:]
	p.cost -= cost
	if q.fair != nil {
		q.fair.released(p, n, cost)
	}
	return ops, cost
}

// done is called when the release is through with p, the front batch: an
// empty p leaves the queue.
func (q *readyQueue) done(p *pending) {
	if len(p.ops) == 0 && q.fair == nil {
		q.fifo[q.head] = nil
		q.head++
	}
}

// eachFree calls release with the ready batches of zero cost that may pass a
// head waiting for credit, since they need none: those whose watcher has no
// earlier batch waiting (a watcher's operations keep their order). release
// either takes every operation of the batch it is given and returns true,
// or takes none and returns false, which ends the walk.
func (q *readyQueue) eachFree(release func(p *pending) bool) {
	if q.free == 0 {
		return
	}
	if q.fair != nil {
		stopped := false
		q.fair.heads(func(p *pending) bool {
			if stopped || p.cost != 0 {
				return false
			}
			stopped = !release(p)
			return !stopped
		})
		return
	}
	waiting := map[IWatcher]bool{}
	for _, p := range q.fifo[q.head:] {
		if len(p.ops) == 0 {
			continue
		}
		if p.cost == 0 && !waiting[p.w] {
			if !release(p) {
				return
			}
			continue
		}
		waiting[p.w] = true
	}
}

// compact drops released entries from the front of the queue, in one go
// once it is empty and otherwise once they are most of it, so that a long
// backlog is not copied at every release.
func (q *readyQueue) compact() {
	if q.head == len(q.fifo) {
		q.fifo = q.fifo[:0]
		q.head = 0
		return
	}
	if q.head > 1024 && q.head > len(q.fifo)/2 {
		n := copy(q.fifo, q.fifo[q.head:])
		clear(q.fifo[n:])
		q.fifo = q.fifo[:n]
		q.head = 0
	}
}
