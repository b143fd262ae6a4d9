package limit

import "math"

// state is the state of one key under one policy, in the units of params.
// What a, b and c hold depends on the algorithm:
//
//	token bucket    a: debt in units (a token weighs p units), b: time of a (µs)
//	gcra            a: theoretical arrival time (µs), b: its fraction, in 1/n µs
//	fixed window    a: window index since the epoch, b: count
//	sliding window  a: window index, b: current count, c: previous count
//
// The zero state is a key at rest. The rolling window keeps a rollingLog.
type state struct{ a, b, c int64 }

// decide decides cost at now (µs) on s and returns the decision and the state
// to keep. When the decision is denied and count is false, the state returned
// is s, unchanged. With count, the window algorithms count denied costs too.
// decide never panics, whatever the inputs, and time going backwards (now
// before a time in s) never gives back spent capacity.
func (pr *params) decide(s state, now, cost int64, count bool) (Decision, state) {
	switch pr.alg {
	case algTokenBucket, algGCRA:
		var dec Decision
		return dec, pr.decideRate(&dec, s, now, cost)
	case algFixed:
		return pr.fixed(s, now, cost, count)
	case algSliding:
		return pr.sliding(s, now, cost, count)
	}
	return Decision{}, s
}

// decideRate is decide for the token bucket and GCRA, writing the decision
// into dec (every field but Policy and Err), which spares the copies of a
// Decision on the path of every decision.
func (pr *params) decideRate(dec *Decision, s state, now, cost int64) state {
	if pr.alg == algTokenBucket {
		t := max(now, s.b)
		d := drain(s.a, s.b, t, pr.n)
		nd := pr.bucketTo(dec, d, cost)
		if !dec.Allowed || cost == 0 {
			return s
		}
		return state{a: nd, b: t}
	}
	d := pr.gcraDebt(s, now)
	nd := pr.bucketTo(dec, d, cost)
	if !dec.Allowed || cost == 0 {
		return s
	}
	if pr.n == 1 { // the usual case (a whole number of µs per token): no division
		return state{a: now + nd}
	}
	return state{a: now + nd/pr.n, b: nd % pr.n}
}

// drain returns the debt d, dated last, left at now: n units drain per µs.
func drain(d, last, now, n int64) int64 {
	if d <= 0 {
		return 0
	}
	el := now - last
	if el <= 0 {
		return d
	}
	if n == 1 { // the usual case: no division
		return max(0, d-el)
	}
	if el > d/n { // checked first so that el*n cannot overflow
		return 0
	}
	return d - el*n
}

// gcraDebt returns the debt of a GCRA state at now: (TAT - now) * n.
func (pr *params) gcraDebt(s state, now int64) int64 {
	diff := s.a - now
	if diff < 0 {
		return 0
	}
	// Far ahead (the application's clock went back): cap, so that no
	// product overflows; the key stays full either way.
	if diff > pr.gcraLim {
		diff = pr.gcraLim
	}
	return diff*pr.n + s.b
}

// bucket decides cost on a debt d of the token bucket or GCRA.
func (pr *params) bucket(d, cost int64) (Decision, int64) {
	var dec Decision
	nd := pr.bucketTo(&dec, d, cost)
	return dec, nd
}

// bucketTo is bucket writing the decision into dec, which it overwrites but
// for Policy and Err.
func (pr *params) bucketTo(dec *Decision, d, cost int64) int64 {
	dec.Allowed, dec.Reason, dec.Limit, dec.RetryAfter = false, ReasonNone, pr.limit, 0
	nd := d
	switch need := d + cost*pr.p; {
	case cost > pr.limit:
		dec.Reason = ReasonExceedsLimit
	case need > pr.cap && cost > 0:
		dec.Reason = ReasonLimited
		if pr.n == 1 {
			dec.RetryAfter = micros(need - pr.cap)
		} else {
			dec.RetryAfter = micros(ceilDiv(need-pr.cap, pr.n))
		}
	default:
		dec.Allowed = true
		nd = need
	}
	dec.Remaining = pr.perToken(pr.cap - nd)
	if pr.n == 1 {
		dec.ResetAfter = micros(nd)
	} else {
		dec.ResetAfter = micros(ceilDiv(nd, pr.n))
	}
	return nd
}

// perToken returns max(0, floor(u/p)): the whole tokens in u units. It
// multiplies by 1/p in floating point, which is off by at most one for any
// u up to 2^52, and corrects: a division by a variable is several times
// slower, and this is on the path of every decision. Less than one token
// (every denial of a cost of 1) takes one comparison: p is at least 1.
func (pr *params) perToken(u int64) int64 {
	if u < pr.p {
		return 0
	}
	q := int64(float64(u) * pr.invP)
	if q*pr.p > u {
		q--
	} else if (q+1)*pr.p <= u {
		q++
	}
	return q
}

func (pr *params) fixed(s state, now, cost int64, count bool) (Decision, state) {
	id := now / pr.w
	if id < s.a { // time went back: stay in the stored window
		id, now = s.a, s.a*pr.w
	}
	var n int64
	if id == s.a {
		n = s.b
	}
	end := (id + 1) * pr.w
	dec := Decision{Limit: pr.limit}
	switch {
	case cost > pr.limit:
		dec.Reason = ReasonExceedsLimit
	case n+cost > pr.limit && cost > 0:
		dec.Reason = ReasonLimited
		dec.RetryAfter = micros(end - now)
	default:
		dec.Allowed = true
	}
	out := s
	if dec.Allowed && cost > 0 || count && cost > 0 {
		n = min(n+cost, maxUnits/pr.w)
		out = state{a: id, b: n}
	}
	dec.Remaining = max(0, pr.limit-n)
	if n > 0 {
		dec.ResetAfter = micros(end - now)
	}
	return dec, out
}

func (pr *params) sliding(s state, now, cost int64, count bool) (Decision, state) {
	w := pr.w
	id := now / w
	if id < s.a {
		id, now = s.a, s.a*w
	}
	var cur, prev int64
	switch id - s.a {
	case 0:
		cur, prev = s.b, s.c
	case 1:
		prev = s.b
	}
	e := now - id*w
	lim := pr.limit * w
	dec := Decision{Limit: pr.limit}
	switch {
	case cost > pr.limit:
		dec.Reason = ReasonExceedsLimit
	case prev*(w-e)+(cur+cost)*w > lim && cost > 0:
		dec.Reason = ReasonLimited
		dec.RetryAfter = micros(pr.slidingRetry(prev, cur, cost, e))
	default:
		dec.Allowed = true
	}
	out := s
	if dec.Allowed && cost > 0 || count && cost > 0 {
		cur = min(cur+cost, 2*pr.limit)
		out = state{a: id, b: cur, c: prev}
	}
	dec.Remaining = max(0, (lim-prev*(w-e)-cur*w)/w)
	switch {
	case cur > 0:
		dec.ResetAfter = micros(2*w - e)
	case prev > 0:
		dec.ResetAfter = micros(w - e)
	}
	return dec, out
}

// slidingRetry returns how long after e (µs into the current window) the
// weighted count leaves room for cost. It requires cost <= limit and a
// denied decision, so prev > 0 in the first case and cur > 0 in the second.
func (pr *params) slidingRetry(prev, cur, cost, e int64) int64 {
	w := pr.w
	if cur+cost <= pr.limit {
		// Room comes in this window once prev*(w-e') <= (limit-cur-cost)*w.
		e2 := w - (pr.limit-cur-cost)*w/prev
		return e2 - e
	}
	// Room comes in the next window, where cur has become the previous count.
	e2 := w - (pr.limit-cost)*w/cur
	return w - e + e2
}

// settle charges (delta > 0) or refunds (delta < 0) s at now without a
// decision: a charge may go past the limit by up to one limit, a refund stops
// at rest.
func (pr *params) settle(s state, now, delta int64) (Decision, state) {
	delta = max(-2*pr.limit, min(delta, 2*pr.limit))
	switch pr.alg {
	case algTokenBucket:
		t := max(now, s.b)
		d := max(0, min(drain(s.a, s.b, t, pr.n)+delta*pr.p, 2*pr.cap))
		dec, _ := pr.bucket(d, 0)
		return dec, state{a: d, b: t}
	case algGCRA:
		d := max(0, min(pr.gcraDebt(s, now)+delta*pr.p, 2*pr.cap))
		dec, _ := pr.bucket(d, 0)
		return dec, state{a: now + d/pr.n, b: d % pr.n}
	case algFixed:
		id := max(now/pr.w, s.a)
		n := s.b
		if id != s.a {
			n = 0
		}
		s = state{a: id, b: max(0, min(n+delta, 2*pr.limit))}
		dec, _ := pr.fixed(s, now, 0, false)
		return dec, s
	case algSliding:
		s = pr.slidingNorm(s, now)
		if delta >= 0 {
			s.b = min(s.b+delta, 2*pr.limit)
		} else {
			take := min(s.b, -delta)
			s.b -= take
			s.c = max(0, s.c-(-delta-take))
		}
		dec, _ := pr.sliding(s, now, 0, false)
		return dec, s
	}
	return Decision{}, s
}

// slidingNorm moves s to the window of now.
func (pr *params) slidingNorm(s state, now int64) state {
	id := max(now/pr.w, s.a)
	switch id - s.a {
	case 0:
		return s
	case 1:
		return state{a: id, c: s.b}
	}
	return state{a: id}
}

// atRest reports whether s decides at now as a key never seen.
func (pr *params) atRest(s state, now int64) bool {
	switch pr.alg {
	case algTokenBucket:
		return drain(s.a, s.b, max(now, s.b), pr.n) == 0
	case algGCRA:
		return pr.gcraDebt(s, now) == 0
	case algFixed:
		return s.b == 0 || now/pr.w > s.a
	case algSliding:
		id := now / pr.w
		return id > s.a+1 || id == s.a+1 && s.b == 0 || id == s.a && s.b == 0 && s.c == 0
	}
	return true
}

// restAt returns the time (µs) from which s decides as a key never seen:
// math.MinInt64 when it does at any time. A decision only ever moves it
// later (a settle's refund may move it earlier), which the memory store's
// bound on the rest of a shard's keys relies on (see memkeys.go).
func (pr *params) restAt(s state) int64 {
	switch pr.alg {
	case algTokenBucket:
		if s.a > 0 {
			return s.b + ceilDiv(s.a, pr.n)
		}
	case algGCRA:
		if s.b > 0 {
			return s.a + 1
		}
		if s.a != 0 {
			return s.a
		}
	case algFixed:
		if s.b > 0 {
			return (s.a + 1) * pr.w
		}
	case algSliding:
		if s.b > 0 {
			return (s.a + 2) * pr.w
		}
		if s.c > 0 {
			return (s.a + 1) * pr.w
		}
	}
	return math.MinInt64
}

// spent returns what evicting a key in state s at now forgives: its debt or
// count in the policy's units, 0 for a key at rest.
func (pr *params) spent(s state, now int64) int64 {
	switch pr.alg {
	case algTokenBucket:
		return drain(s.a, s.b, max(now, s.b), pr.n)
	case algGCRA:
		return pr.gcraDebt(s, now)
	case algFixed:
		if now/pr.w > s.a {
			return 0
		}
		return s.b
	case algSliding:
		s = pr.slidingNorm(s, now)
		return s.b + s.c
	}
	return 0
}
