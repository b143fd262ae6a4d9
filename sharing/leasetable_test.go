package sharing

import (
	"testing"
	"time"
)

func TestLeaseTiming(t *testing.T) {
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		lease                        time.Duration
		margin, validFor, renewAfter time.Duration
	}{
		{15 * time.Second, 2 * time.Second, 13 * time.Second, 10 * time.Second},
		{60 * time.Second, 6 * time.Second, 54 * time.Second, 40 * time.Second},
		{30 * time.Second, 3 * time.Second, 27 * time.Second, 20 * time.Second},
		{3 * time.Second, 750 * time.Millisecond, 2250 * time.Millisecond, 2 * time.Second},
		{time.Second, 250 * time.Millisecond, 750 * time.Millisecond, 666666666},
	}
	for _, c := range cases {
		if got := validityMargin(c.lease); got != c.margin {
			t.Errorf("validityMargin(%v) = %v, want %v", c.lease, got, c.margin)
		}
		l := newHeldLease(t0, c.lease)
		if got := l.validUntil.Sub(t0); got != c.validFor {
			t.Errorf("lease %v: valid for %v, want %v", c.lease, got, c.validFor)
		}
		if got := l.renewAt.Sub(t0); got != c.renewAfter {
			t.Errorf("lease %v: renewed after %v, want %v", c.lease, got, c.renewAfter)
		}
		if !l.renewAt.Before(l.validUntil) || !l.validUntil.Before(l.expires) {
			t.Errorf("lease %v: want renewAt < validUntil < expires, got %v", c.lease, l)
		}
	}
}

func TestLeaseTableSteps(t *testing.T) {
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	d := 15 * time.Second
	tab := leaseTable{
		2: newHeldLease(t0, d),
		0: newHeldLease(t0.Add(4*time.Second), d),
	}
	steps := []struct {
		at                time.Duration
		valid             int
		due, expired      []int
		next              time.Duration
		nextOK, checkNext bool
	}{
		{at: 0, valid: 2, next: 10 * time.Second, nextOK: true, checkNext: true},
		{at: 9999 * time.Millisecond, valid: 2},
		{at: 10 * time.Second, valid: 2, due: []int{2}, next: 13 * time.Second, nextOK: true, checkNext: true},
		{at: 12999 * time.Millisecond, valid: 2, due: []int{2}},
		{at: 13 * time.Second, valid: 1, due: []int{2}, next: 14 * time.Second, nextOK: true, checkNext: true},
		{at: 14 * time.Second, valid: 1, due: []int{0, 2}},
		{at: 15 * time.Second, valid: 1, due: []int{0, 2}, expired: []int{2}},
		{at: 17 * time.Second, valid: 0, due: []int{0, 2}, expired: []int{2}},
		{at: 19 * time.Second, valid: 0, due: []int{0, 2}, expired: []int{0, 2}},
	}
	for _, s := range steps {
		now := t0.Add(s.at)
		if got, _ := tally(tab.view(), now, 10, 1); got != s.valid {
			t.Errorf("at %v: %d valid, want %d", s.at, got, s.valid)
		}
		if got := tab.dueForRenewal(now); !equalInts(got, s.due) {
			t.Errorf("at %v: due for renewal %v, want %v", s.at, got, s.due)
		}
		if got := tab.expired(now); !equalInts(got, s.expired) {
			t.Errorf("at %v: expired %v, want %v", s.at, got, s.expired)
		}
		if s.checkNext {
			next, ok := tab.nextEvent(now)
			if ok != s.nextOK || next.Sub(t0) != s.next {
				t.Errorf("at %v: next event at %v (%v), want %v", s.at, next.Sub(t0), ok, s.next)
			}
		}
	}
	if _, ok := (leaseTable{}).nextEvent(t0); ok {
		t.Error("an empty table has a next event")
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestPartitionWorth checks that the partitions of a shared capacity are
// worth exactly that capacity, whatever its remainder by the factor.
func TestPartitionWorth(t *testing.T) {
	for _, tc := range []struct {
		shared, factor uint32
		last           uint32 // worth of the last partition
	}{
		{1000, 1000, 1000}, {1001, 1000, 1}, {10500, 1000, 500}, {7, 1, 1},
		{10, 3, 1}, {999, 1000, 999}, {1 << 31, 1 << 30, 1 << 30}, {4294967295, 10000000, 4967295},
	} {
		count := int((uint64(tc.shared) + uint64(tc.factor) - 1) / uint64(tc.factor))
		var sum uint64
		for p := 0; p < count; p++ {
			sum += uint64(partitionWorth(p, tc.shared, tc.factor))
		}
		if sum != uint64(tc.shared) {
			t.Errorf("shared %d factor %d: the %d partitions are worth %d", tc.shared, tc.factor, count, sum)
		}
		if got := partitionWorth(count-1, tc.shared, tc.factor); got != tc.last {
			t.Errorf("shared %d factor %d: last partition worth %d, want %d", tc.shared, tc.factor, got, tc.last)
		}
		if got := partitionWorth(count, tc.shared, tc.factor) + partitionWorth(-1, tc.shared, tc.factor); got != 0 {
			t.Errorf("shared %d factor %d: partitions out of range worth %d", tc.shared, tc.factor, got)
		}
	}
}

// TestValidCapacity checks what a table of held leases is worth as the
// leases lapse, with the last partition worth the remainder.
func TestValidCapacity(t *testing.T) {
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	leases := []validLease{{0, t0.Add(time.Second)}, {1, t0.Add(3 * time.Second)}, {10, t0.Add(2 * time.Second)}}
	for _, s := range []struct {
		at   time.Duration
		want uint32
	}{{0, 2500}, {time.Second, 1500}, {2 * time.Second, 1000}, {3 * time.Second, 0}} {
		if _, got := tally(leases, t0.Add(s.at), 10500, 1000); got != s.want {
			t.Errorf("at %v: capacity %d, want %d", s.at, got, s.want)
		}
	}
}
