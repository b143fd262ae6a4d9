package main

import (
	"math"
	"sync"
	"time"
)

// How the interactive traffic gets its room with the library
//
// Every replica reserves an allowance for its user requests (--reserved,
// by default its expected interactive RU/s): a replica with no bulk work
// holds no partition, and its users must still be served. The user
// requests are never delayed: they go to the datastore at once. What they
// are charged is then counted through the same budget as the bulk jobs:
// the batcher's rate limiter is the replica's shared resource less what the
// user requests spent in the last moment (meteredLimiter below), so the
// bulk jobs release that much less. A busy replica therefore uses the
// whole of its reservation and partitions, whatever its users do, and a
// quiet one leaves nothing idle but what its users did not use of its
// allowance.

// meterWindow is how long a user request's charge lowers the capacity the
// batcher sees: its RU are taken out at RU/meterWindow per second over
// about the next meterWindow. Short, so that the bulk jobs give way within
// the same datastore window; long enough to span a few of the batcher's
// releases.
const meterWindow = 100 * time.Millisecond

// meteredLimiter is the RateLimiter of a replica's batcher with the
// library: its shared resource, less the RU/s its user requests are
// spending now. GiveMe adds the user requests' rate over the last second to
// the batcher's target while the batcher has work, so that the replica
// leases enough partitions for both. It is safe for concurrent use.
type meteredLimiter struct {
	sharedLimiter
	now func() time.Time

	mu     sync.Mutex
	until  time.Time // no capacity before then: the retry-after of a 429
	recent []charge  // the charges of the last meterWindow, oldest first
	sum    uint64    // their RU
	second ring      // the last second
}

// charge is one user request's RU, spent at a moment.
type charge struct {
	at time.Time
	ru uint64
}

// newMeteredLimiter wraps inner.
func newMeteredLimiter(inner sharedLimiter) *meteredLimiter {
	return &meteredLimiter{sharedLimiter: inner, now: time.Now, second: newRing(time.Second, 10)}
}

// charge counts ru spent by a user request now.
func (m *meteredLimiter) charge(ru uint32) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire(now)
	m.recent = append(m.recent, charge{at: now, ru: uint64(ru)})
	m.sum += uint64(ru)
	m.second.add(now, uint64(ru))
}

// expire drops the charges older than meterWindow. Requires m.mu.
func (m *meteredLimiter) expire(now time.Time) {
	i := 0
	for i < len(m.recent) && now.Sub(m.recent[i].at) >= meterWindow {
		m.sum -= m.recent[i].ru
		i++
	}
	if i > 0 {
		m.recent = append(m.recent[:0], m.recent[i:]...)
	}
}

// hold gives the batcher no capacity for d: the datastore throttled a
// request and said, in the retry-after, when it will have room again.
// The batcher's own Pause would wait its fixed pause time instead (500 ms
// by default, doubling), which at these rates wastes more than the 429.
func (m *meteredLimiter) hold(d time.Duration) {
	until := m.now().Add(d)
	m.mu.Lock()
	defer m.mu.Unlock()
	if until.After(m.until) {
		m.until = until
	}
}

// Capacity returns the shared resource's capacity less the RU/s the user
// requests are spending: each request's RU spread over the meterWindow
// after it, so that over time the batcher is short of exactly what they
// spent. It is never below zero, and zero while a 429's retry-after runs.
func (m *meteredLimiter) Capacity() uint32 {
	held := m.sharedLimiter.Capacity()
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if now.Before(m.until) {
		return 0
	}
	m.expire(now)
	use := float64(m.sum) / meterWindow.Seconds()
	return held - min(held, uint32(math.Ceil(use)))
}

// held returns the shared resource's capacity: what the replica holds for
// its bulk and user requests together.
func (m *meteredLimiter) held() uint32 { return m.sharedLimiter.Capacity() }

// drainTime is how soon a replica wants to be done with its backlog. The
// batcher's target is the cost of everything it holds, and a limiter that
// gives exactly the target finishes it in a second; but as the backlog
// shrinks the target shrinks with it, and the last records trickle out
// over several seconds (the backlog decays by e every second) while the
// partitions they no longer ask for wait for another replica to notice
// them. Asking for the capacity that would finish the backlog within
// drainTime keeps the replica at its fair share until its last records,
// then lets everything go at once.
const drainTime = 100 * time.Millisecond

// GiveMe asks the shared resource for the capacity that would release
// target within drainTime, plus the user requests' rate over the last
// second; or for nothing when target is zero: a replica without bulk work
// relies on its reservation for its users and holds no partition.
func (m *meteredLimiter) GiveMe(target uint32) {
	if target > 0 {
		m.mu.Lock()
		users := m.second.rate(m.now())
		m.mu.Unlock()
		want := float64(target)*float64(time.Second)/float64(drainTime) + users
		target = uint32(min(want, math.MaxUint32))
	}
	m.sharedLimiter.GiveMe(target)
}

// ring counts RU in n buckets that together span a span of time.
type ring struct {
	width time.Duration // of one bucket
	slot  []int64       // which slot of time each bucket holds; older is stale
	ru    []uint64
}

func newRing(span time.Duration, n int) ring {
	return ring{width: span / time.Duration(n), slot: make([]int64, n), ru: make([]uint64, n)}
}

// add counts ru in the bucket of now.
func (r *ring) add(now time.Time, ru uint64) {
	s := now.UnixNano() / int64(r.width)
	i := int(s % int64(len(r.slot)))
	if r.slot[i] != s {
		r.slot[i], r.ru[i] = s, 0
	}
	r.ru[i] += ru
}

// rate returns the RU per second counted in the buckets of the span that
// ends with now's bucket.
func (r *ring) rate(now time.Time) float64 {
	s := now.UnixNano() / int64(r.width)
	var total uint64
	for i, slot := range r.slot {
		if slot > s-int64(len(r.slot)) && slot <= s {
			total += r.ru[i]
		}
	}
	return float64(total) / (r.width * time.Duration(len(r.slot))).Seconds()
}
