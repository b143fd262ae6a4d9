package sharing

import (
	"sort"
	"time"
)

// heldLease is what a Resource knows of one lease it holds. All of
// its times derive from sent, the moment the last successful acquire or
// renew request was sent: the store started the lease no earlier than that,
// so the lease cannot end before sent + duration by the store's clock.
type heldLease struct {
	sent       time.Time // when the last successful acquire or renew was sent
	validUntil time.Time // counted as capacity until then
	renewAt    time.Time // renewed from then on
	expires    time.Time // the store's lease has surely ended by then
}

// newHeldLease returns the timing of a lease of duration d whose acquire or
// renew request was sent at sent.
func newHeldLease(sent time.Time, d time.Duration) heldLease {
	return heldLease{
		sent:       sent,
		validUntil: sent.Add(d - validityMargin(d)),
		renewAt:    sent.Add(d * 2 / 3),
		expires:    sent.Add(d),
	}
}

// validityMargin is how long before a lease could end that a
// Resource stops counting it: max(2 s, 10 %) of the lease, to absorb
// the difference between this clock's rate and the store's, but at most a
// quarter of the lease so that a lease is renewed (at two thirds of it)
// before it stops counting.
func validityMargin(d time.Duration) time.Duration {
	m := max(2*time.Second, d/10)
	return min(m, d/4)
}

// leaseTable is the set of leases a Resource holds, keyed by
// partition. It is owned by the resource's loop goroutine; other goroutines
// read only the view it publishes.
type leaseTable map[int]heldLease

// indexes returns the partitions held, in ascending order.
func (t leaseTable) indexes() []int {
	out := make([]int, 0, len(t))
	for i := range t {
		out = append(out, i)
	}
	sort.Ints(out)
	return out
}

// dueForRenewal returns the partitions whose renewal time has come at now,
// in ascending order.
func (t leaseTable) dueForRenewal(now time.Time) []int {
	var out []int
	for _, i := range t.indexes() {
		if !now.Before(t[i].renewAt) {
			out = append(out, i)
		}
	}
	return out
}

// expired returns the partitions whose store lease has surely ended at now.
func (t leaseTable) expired(now time.Time) []int {
	var out []int
	for _, i := range t.indexes() {
		if !now.Before(t[i].expires) {
			out = append(out, i)
		}
	}
	return out
}

// validLease is what Capacity knows of a held lease: its partition, and
// until when it counts.
type validLease struct {
	partition int
	until     time.Time
}

// view returns the partitions and validity deadlines that Capacity counts.
func (t leaseTable) view() []validLease {
	out := make([]validLease, 0, len(t))
	for p, l := range t {
		out = append(out, validLease{p, l.validUntil})
	}
	return out
}

// nextEvent returns the earliest renewal time, or validity end for a lease
// already due for renewal, after which the loop must look at the table
// again; ok is false when the table is empty.
func (t leaseTable) nextEvent(now time.Time) (next time.Time, ok bool) {
	for _, l := range t {
		at := l.renewAt
		if !now.Before(at) {
			// Renewal is overdue (it failed): wake when the lease stops
			// counting, to report the capacity change.
			at = l.validUntil
			if !now.Before(at) {
				at = l.expires
			}
		}
		if !ok || at.Before(next) {
			next, ok = at, true
		}
	}
	return next, ok
}

// tally returns how many of the leases are valid at now and the capacity
// they are worth, with shared split by factor (see partitionWorth). It is
// the one place that decides which held leases count.
func tally(leases []validLease, now time.Time, shared, factor uint32) (held int, capacity uint32) {
	for _, l := range leases {
		if now.Before(l.until) {
			held++
			capacity += partitionWorth(l.partition, shared, factor)
		}
	}
	return held, capacity
}

// partitionWorth returns the capacity partition p is worth when shared is
// split into ceil(shared/factor) partitions: factor, except the last, which
// is worth only the remainder when shared is not a multiple of factor, and
// a partition past the last (left over from a larger shared capacity, and
// being released), which is worth nothing. So the partitions together are
// worth exactly shared, and no instance ever counts more than exists.
func partitionWorth(p int, shared, factor uint32) uint32 {
	if factor == 0 {
		return 0
	}
	count := int((uint64(shared) + uint64(factor) - 1) / uint64(factor))
	switch {
	case p < 0 || p >= count:
		return 0
	case p == count-1 && shared%factor != 0:
		return shared % factor
	}
	return factor
}
