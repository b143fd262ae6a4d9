package limit

import "math"

// rollingLog is the state of a key under the rolling window (the sliding
// log): the time and cost of every admitted decision in the window, oldest
// first, in a ring that grows up to the policy's limit entries.
type rollingLog struct {
	buf  []rollEntry
	head int   // index of the oldest entry
	n    int   // entries held
	sum  int64 // total cost held
	last int64 // time of the newest entry pushed (µs), for EvictLRU
}

type rollEntry struct{ t, c int64 }

func (l *rollingLog) at(i int) *rollEntry { return &l.buf[(l.head+i)%len(l.buf)] }

// expire drops the entries whose window has passed at now.
func (l *rollingLog) expire(now, w int64) {
	for l.n > 0 {
		e := l.at(0)
		if e.t+w > now {
			return
		}
		l.sum -= e.c
		l.head = (l.head + 1) % len(l.buf)
		l.n--
	}
}

func (l *rollingLog) push(t, c int64) {
	if l.n == len(l.buf) {
		nb := make([]rollEntry, max(4, 2*len(l.buf)))
		for i := 0; i < l.n; i++ {
			nb[i] = *l.at(i)
		}
		l.buf, l.head = nb, 0
	}
	if l.n > 0 && l.at(l.n-1).t == t {
		l.at(l.n - 1).c += c // one entry per instant keeps the log short
	} else {
		*l.at(l.n) = rollEntry{t, c}
		l.n++
	}
	l.sum += c
	l.last = t
}

// now returns the time to decide at: never before the newest entry, so
// that time going back cannot make an entry leave the window early.
func (l *rollingLog) now(now int64) int64 {
	if l.n > 0 {
		return max(now, l.at(l.n-1).t)
	}
	return now
}

// decideRolling decides cost at now on l, spending it if allowed (or, with
// count... the rolling window never counts denied costs). pending is cost
// already promised to this key by an earlier request of the same
// all-or-nothing decision, not yet pushed.
func (pr *params) decideRolling(l *rollingLog, now, cost, pending int64, spend bool) Decision {
	now = l.now(now)
	l.expire(now, pr.w)
	sum := l.sum + pending
	dec := Decision{Limit: pr.limit}
	switch {
	case cost > pr.limit:
		dec.Reason = ReasonExceedsLimit
	case sum+cost > pr.limit && cost > 0:
		dec.Reason = ReasonLimited
		dec.RetryAfter = micros(pr.rollingRetry(l, now, sum+cost-pr.limit))
	default:
		dec.Allowed = true
		if spend && cost > 0 {
			l.push(now, cost)
		}
		sum += cost
	}
	dec.Remaining = max(0, pr.limit-sum)
	switch {
	case pending > 0 || dec.Allowed && cost > 0:
		dec.ResetAfter = micros(pr.w)
	case l.n > 0:
		dec.ResetAfter = micros(l.at(l.n-1).t + pr.w - now)
	}
	return dec
}

// rollingRetry returns how long until entries totalling at least excess
// have left the window.
func (pr *params) rollingRetry(l *rollingLog, now, excess int64) int64 {
	var freed int64
	for i := 0; i < l.n; i++ {
		e := l.at(i)
		freed += e.c
		if freed >= excess {
			return e.t + pr.w - now
		}
	}
	return pr.w // only pending cost of this decision: it leaves a window from now
}

// settleRolling charges or refunds l at now: a charge is logged at now, a
// refund removes the newest costs first.
func (pr *params) settleRolling(l *rollingLog, now, delta int64) Decision {
	now = l.now(now)
	l.expire(now, pr.w)
	delta = max(-2*pr.limit, min(delta, 2*pr.limit))
	if c := min(delta, 2*pr.limit-l.sum); c > 0 {
		l.push(now, c)
	}
	for delta < 0 && l.n > 0 {
		e := l.at(l.n - 1)
		take := min(e.c, -delta)
		e.c -= take
		l.sum -= take
		delta += take
		if e.c == 0 {
			l.n--
		}
	}
	return pr.decideRolling(l, now, 0, 0, false)
}

func (l *rollingLog) atRest(now, w int64) bool {
	return l.n == 0 || l.at(l.n-1).t+w <= now
}

// restAt is params.restAt for a rolling log under window w.
func (l *rollingLog) restAt(w int64) int64 {
	if l.n == 0 {
		return math.MinInt64
	}
	return l.at(l.n-1).t + w
}

// spent returns the cost l holds in the window at now.
func (l *rollingLog) spent(now, w int64) int64 {
	sum := l.sum
	for i := 0; i < l.n && l.at(i).t+w <= now; i++ {
		sum -= l.at(i).c
	}
	return sum
}
