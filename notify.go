package batcher

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/costwise/batcher/internal/events"
)

// Listeners of a Batcher run on a goroutine of their own, the notifier, and
// never on the loop. The loop only appends its events to an eventQueue, so
// it never waits on a listener, and the notifier calls the listeners with
// them in the order they were raised. That is what lets a listener call any
// method without deadlock and without the batcher knowing which goroutine
// calls it: Stop and Shutdown wait for the loop, which is never blocked by a
// listener; a blocking Enqueue waits for room, which the loop keeps making.
// The one thing a listener cannot wait for is the notifier itself, so Stop,
// called while a listener runs, waits for the delivery of the last events
// only once that listener has returned (see Stop).

// event is one event raised by the loop and not yet delivered.
type event struct {
	name     string
	val      int
	msg      string
	metadata interface{}
}

// eventQueue hands the loop's events to the notifier. Two slices take turns,
// so a steady flow of events allocates nothing. The zero value is ready to
// use.
type eventQueue struct {
	mu        sync.Mutex // guards items and spare
	items     []event
	spare     []event
	notify    chan struct{} // buffered 1; a pending send means "events waiting"
	busy      atomic.Bool   // a listener is running
	delivered atomic.Uint64 // events whose listeners have returned (see movedOn)
}

// push appends e for delivery and wakes the notifier; it never blocks.
func (q *eventQueue) push(e event) {
	q.mu.Lock()
	q.items = append(q.items, e)
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// deliver calls the listeners of reg with every queued event, in order,
// until the queue is empty. Only one goroutine at a time may call it: the
// notifier, or a test harness that stands in for it.
func (q *eventQueue) deliver(reg *events.Registry) {
	for {
		q.mu.Lock()
		items := q.items
		if len(items) == 0 {
			// Swapping now would leave items and spare on one array, and
			// the next push would write into what the next delivery reads.
			q.mu.Unlock()
			return
		}
		q.items = q.spare[:0]
		q.mu.Unlock()
		q.busy.Store(true)
		for i := range items {
			e := &items[i]
			reg.Emit(e.name, e.val, e.msg, e.metadata)
			q.delivered.Add(1)
		}
		q.busy.Store(false)
		clear(items)
		q.mu.Lock()
		q.spare = items[:0]
		q.mu.Unlock()
	}
}

// listenerGrace is how long Stop, called while a listener runs, waits for
// that listener to return before it takes itself for the listener (or a
// goroutine the listener waits for) and stops waiting for the delivery.
const listenerGrace = 100 * time.Millisecond

// movedOn reports whether the event being delivered when delivered read
// seen has its listeners return within grace, or done closes first. A caller
// inside one of those listeners blocks them, so for that caller it reports
// false once grace has passed; a caller outside sees them return as soon as
// they do.
func (q *eventQueue) movedOn(seen uint64, grace time.Duration, done <-chan struct{}) bool {
	if q.delivered.Load() != seen {
		return true
	}
	deadline := time.Now().Add(grace)
	tick := time.NewTicker(50 * time.Microsecond)
	defer tick.Stop()
	for q.delivered.Load() == seen {
		if !time.Now().Before(deadline) {
			return false
		}
		select {
		case <-done:
			return true
		case <-tick.C:
		}
	}
	return true
}

// raise queues an event of the loop for the notifier. With no listener
// registered it costs nothing: the event is dropped, as Emit would call
// nobody. Loop goroutine only.
func (b *Batcher) raise(name string, val int, msg string, metadata interface{}) {
	if b.listeners.Empty() {
		return
	}
	b.undelivered.push(event{name: name, val: val, msg: msg, metadata: metadata})
}

// notifier is the goroutine that calls the listeners with the loop's events.
// It ends once the loop has ended and its last events, the shutdown event
// among them, are delivered.
func (b *Batcher) notifier() {
	defer close(b.notifierDone)
	for {
		select {
		case <-b.undelivered.notify:
			b.undelivered.deliver(&b.listeners)
		case <-b.loopDone:
			b.undelivered.deliver(&b.listeners)
			return
		}
	}
}
