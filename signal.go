package batcher

import "time"

// signal is one case of the loop's select: what woke it.
type signal uint8

const (
	sigStop     signal = iota // Stop
	sigDrain                  // Shutdown, with the reply to close once drained
	sigWake                   // new operations, finished callbacks
	sigFlushT                 // the flush interval
	sigFlush                  // Flush
	sigCapacity               // the capacity interval
	sigAudit                  // the audit interval
	sigPause                  // Pause
	sigResume                 // the end of a pause
	sigTimer                  // credit due for the waiting batch, or a deadline
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
		return sigStop, nil
	case reply := <-b.drainReq:
		return sigDrain, reply
	case <-b.wake:
		return sigWake, nil
	case <-l.flushT.C():
		return sigFlushT, nil
	case <-b.flushReq:
		return sigFlush, nil
	case <-l.capT.C():
		return sigCapacity, nil
	case <-l.auditT.C():
		return sigAudit, nil
	case <-b.pauseReq:
		return sigPause, nil
	case <-l.pauseTimer.C():
		return sigResume, nil
	case <-l.timer.C():
		return sigTimer, nil
	}
}

// poll is wait that returns false at once when no signal is pending.
func (l *loop) poll() (signal, chan struct{}, bool) {
	b := l.b
	select {
	case <-b.stopReq:
		return sigStop, nil, true
	case reply := <-b.drainReq:
		return sigDrain, reply, true
	case <-b.wake:
		return sigWake, nil, true
	case <-l.flushT.C():
		return sigFlushT, nil, true
	case <-b.flushReq:
		return sigFlush, nil, true
	case <-l.capT.C():
		return sigCapacity, nil, true
	case <-l.auditT.C():
		return sigAudit, nil, true
	case <-b.pauseReq:
		return sigPause, nil, true
	case <-l.pauseTimer.C():
		return sigResume, nil, true
	case <-l.timer.C():
		return sigTimer, nil, true
	default:
		return 0, nil, false
	}
}

// handle reacts to one signal, then runs step; reply is the drain reply of
// sigDrain. It returns false once the loop has finished (sigStop). Loop
// goroutine only.
func (l *loop) handle(sig signal, reply chan struct{}) bool {
	switch sig {
	case sigStop:
		l.finish()
		return false
	case sigDrain:
		l.drain(reply)
	case sigFlushT, sigFlush:
		l.flush()
	case sigCapacity:
		l.requestCapacity()
	case sigAudit:
		l.audit()
	case sigPause:
		l.applyPauses()
	case sigResume:
		l.resume()
	case sigTimer:
		l.timerAt = time.Time{}
	}
	l.step()
	return true
}
