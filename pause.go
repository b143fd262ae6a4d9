package batcher

import "time"

// pauser decides how long each pause lasts. The first Pause lasts the base
// pause time. A Pause that comes while paused, or within one base pause time
// after the last resume, doubles the length (up to max): the datastore is
// still pushing back, so backing off harder is the point. After ten base pause
// times without any Pause, the length returns to the base.
//
// It is owned by the batcher's loop goroutine; every method takes now.
type pauser struct {
	base, max  time.Duration
	length     time.Duration // length of the current or last pause
	start      time.Time     // start of the current or last pause
	until      time.Time     // end of the current pause; zero when not paused
	lastResume time.Time
	lastCall   time.Time
}

// pause applies a Pause at now and returns the length of the pause now in
// force; extended is true when it lengthened a pause already in progress.
func (p *pauser) pause(now time.Time) (length time.Duration, extended bool) {
	switch {
	case p.paused(now):
		p.length = p.doubled()
		p.until = p.start.Add(p.length)
		p.lastCall = now
		return p.length, true
	case !p.lastResume.IsZero() && now.Sub(p.lastResume) <= p.base:
		p.length = p.doubled()
	case p.lastCall.IsZero() || now.Sub(p.lastCall) >= 10*p.base:
		p.length = p.base
	}
	p.start, p.until, p.lastCall = now, now.Add(p.length), now
	return p.length, false
}

func (p *pauser) doubled() time.Duration {
	if p.length >= p.max/2 {
		return p.max
	}
	return 2 * p.length
}

// paused reports whether a pause is in force at now.
func (p *pauser) paused(now time.Time) bool {
	return !p.until.IsZero() && now.Before(p.until)
}

// resume ends the pause if its time has come at now and returns the length
// of the pause that ended; ok is false when there was nothing to end.
func (p *pauser) resume(now time.Time) (length time.Duration, ok bool) {
	if p.until.IsZero() || now.Before(p.until) {
		return 0, false
	}
	p.lastResume = p.until
	p.until = time.Time{}
	return p.length, true
}
