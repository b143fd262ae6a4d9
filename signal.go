package batcher

import "time"

// signal is one case of the loop's select: what woke it.
type signal uint8

const (
	signalStop         signal = iota // Stop
	signalDrain                      // Shutdown, with the reply to close once drained
	signalWake                       // new operations, finished callbacks
	signalFlushTick                  // the flush interval
	signalFlush                      // Flush
	signalCapacityTick               // the capacity interval
	signalAuditTick                  // the audit interval
	signalPause                      // Pause
	signalResume                     // the end of a pause
	signalDue                        // credit due for the waiting batch, or a deadline
)

// wait blocks until the next signal. Loop goroutine only.
//
// poll is the same select without blocking, for the test harness that
// drives the loop by hand: the two must list the same cases, which
// TestPollMatchesWait checks.
func (l *loop) wait() (signal, chan struct{}) {
	b := l.b
	select {
	case <-b.stopReq:
		return signalStop, nil
	case reply := <-b.drainReq:
		return signalDrain, reply
	case <-b.wake:
		return signalWake, nil
	case <-l.flushTicker.C():
		return signalFlushTick, nil
	case <-b.flushReq:
		return signalFlush, nil
	case <-l.capacityTicker.C():
		return signalCapacityTick, nil
	case <-l.auditTicker.C():
		return signalAuditTick, nil
	case <-b.pauseReq:
		return signalPause, nil
	case <-l.pauseTimer.C():
		return signalResume, nil
	case <-l.dueTimer.C():
		return signalDue, nil
	}
}

// poll is wait that returns false at once when no signal is pending.
func (l *loop) poll() (signal, chan struct{}, bool) {
	b := l.b
	select {
	case <-b.stopReq:
		return signalStop, nil, true
	case reply := <-b.drainReq:
		return signalDrain, reply, true
	case <-b.wake:
		return signalWake, nil, true
	case <-l.flushTicker.C():
		return signalFlushTick, nil, true
	case <-b.flushReq:
		return signalFlush, nil, true
	case <-l.capacityTicker.C():
		return signalCapacityTick, nil, true
	case <-l.auditTicker.C():
		return signalAuditTick, nil, true
	case <-b.pauseReq:
		return signalPause, nil, true
	case <-l.pauseTimer.C():
		return signalResume, nil, true
	case <-l.dueTimer.C():
		return signalDue, nil, true
	default:
		return 0, nil, false
	}
}

// handle reacts to one signal, then runs step; reply is the drain reply of
// signalDrain. It returns false once the loop has finished (signalStop). Loop
// goroutine only.
func (l *loop) handle(sig signal, reply chan struct{}) bool {
	switch sig {
	case signalStop:
		l.finish()
		return false
	case signalDrain:
		l.drain(reply)
	case signalFlushTick, signalFlush:
		l.flush()
	case signalCapacityTick:
		l.requestCapacity()
	case signalAuditTick:
		l.audit()
	case signalPause:
		l.applyPauses()
	case signalResume:
		l.resume()
	case signalDue:
		l.dueAt = time.Time{}
	}
	l.step()
	return true
}
