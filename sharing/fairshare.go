package sharing

import (
	"encoding/binary"
	"hash/fnv"
	"maps"
	"slices"
	"sort"
)

// rotationJain is the Jain's index of a split's shares below which the
// remainder rotates. A split of a shares of s partitions, r of them one more,
// is fair enough as it is when the index is at least this (31 and 32
// partitions: 0.9998; 3 and 4: 0.994): keeping it saves the two storage
// writes every moved partition costs, every epoch. A split that leaves an
// owner with nothing always rotates.
const rotationJain = 0.99

// splitJain returns Jain's index (Σx)²/(n·Σx²) of a shares of s partitions
// of which r have one more.
func splitJain(a, r, s int) float64 {
	sum := float64(a*s + r)
	sq := float64(a*s*s + r*(2*s+1))
	return sum * sum / (float64(a) * sq)
}

// fairShares divides partitions among the owners in demands by max-min
// fairness: no owner gets more than it asks for, and the partitions left by
// owners that ask for little are split evenly among the rest. When an even
// split leaves a remainder of R partitions among A unsatisfied owners, one
// extra partition goes to each of R consecutive owners in ascending owner
// order, from a place that moves on by one owner each epoch, wrapping
// around: each epoch one owner hands an extra partition to the next, and
// over A epochs every owner gets R of them (with more owners than
// partitions, R is every partition and the owners take turns). The
// remainder stays with the first R owners, whatever the epoch, when the
// split is already nearly fair (see rotationJain). rotating reports whether
// the shares change with the epoch. The result depends only on the
// arguments, so every instance that reads the same demands at the same
// epoch computes the same shares without talking to the others. Owners
// asking for zero get no entry.
func fairShares(partitions int, demands map[string]uint32, epoch uint64) (shares map[string]int, rotating bool) {
	sp := newSplit(partitions, demands)
	return sp.at(epoch), sp.rotating
}

// split is max-min fairness applied in whole partitions before any
// remainder: the shares, the owners that still want more (in ascending
// order, all with the same share) and the partitions left for them, fewer
// than there are of them; and whether that remainder rotates.
type split struct {
	shares    map[string]int
	active    []string
	remaining int
	rotating  bool
}

// newSplit computes the split of partitions among demands.
func newSplit(partitions int, demands map[string]uint32) split {
	owners := sortedOwners(demands)
	sp := split{shares: make(map[string]int, len(owners)), remaining: partitions, active: owners}
	for len(sp.active) > 0 && sp.remaining > 0 {
		level := sp.remaining / len(sp.active)
		if level == 0 {
			// A remainder rotates when one of the owners left would get
			// nothing, or the split is not fair enough as it stands (see
			// rotationJain).
			s := sp.shares[sp.active[0]]
			sp.rotating = s == 0 || splitJain(len(sp.active), sp.remaining, s) < rotationJain
			return sp
		}
		next := sp.active[:0:0]
		for _, o := range sp.active {
			give := min(int(demands[o])-sp.shares[o], level)
			sp.shares[o] += give
			sp.remaining -= give
			if sp.shares[o] < int(demands[o]) {
				next = append(next, o)
			}
		}
		sp.active = next
	}
	sp.active, sp.remaining = nil, 0
	return sp
}

// extras returns how many extra partitions rotate: the remainder when it
// rotates, else 0.
func (sp split) extras() int {
	if !sp.rotating {
		return 0
	}
	return sp.remaining
}

// at returns the shares at epoch: the remainder handed out one each, in
// owner order from the epoch's place (the first owners when it does not
// rotate), which every instance agrees on.
func (sp split) at(epoch uint64) map[string]int {
	shares := maps.Clone(sp.shares)
	n := uint64(len(sp.active))
	var from uint64
	if sp.rotating {
		from = epoch % n
	}
	for i := range sp.remaining {
		shares[sp.active[(from+uint64(i))%n]]++
	}
	return shares
}

// nextTurn returns the first epoch after epoch at which owner's share
// changes as the remainder rotates, or false when it does not change while
// the demands stay the same.
func (sp split) nextTurn(owner string, epoch uint64) (uint64, bool) {
	if !sp.rotating {
		return 0, false
	}
	j, found := slices.BinarySearch(sp.active, owner)
	if !found {
		return 0, false
	}
	n := uint64(len(sp.active))
	from := epoch % n
	// owner has an extra partition while (j - from) mod n < remaining: it
	// gains one when from reaches j-remaining+1 and loses it at j+1.
	after := func(target uint64) uint64 {
		d := (target + n - from) % n
		if d == 0 {
			d = n
		}
		return d
	}
	gain := after((uint64(j) + n - uint64(sp.remaining) + 1) % n)
	loss := after((uint64(j) + 1) % n)
	return epoch + min(gain, loss), true
}

// gainRange returns the places [lo, hi) that owner takes among the
// partitions freed when shares change from before to after: the owners whose
// share grows, in ascending order, each with as many places as it gains.
// Every instance computes the same ranges, so after a rotation the instances
// that gain take disjoint free partitions (the lo-th to hi-th in ascending
// order) instead of racing for the same ones.
func gainRange(owner string, before, after map[string]int) (lo, hi int) {
	gainers := make([]string, 0)
	for o, n := range after {
		if n > before[o] {
			gainers = append(gainers, o)
		}
	}
	sort.Strings(gainers)
	for _, o := range gainers {
		gain := after[o] - before[o]
		if o == owner {
			return lo, lo + gain
		}
		lo += gain
	}
	return lo, lo
}

// sortedOwners returns the owners with a demand above zero, in ascending
// order.
func sortedOwners(demands map[string]uint32) []string {
	owners := make([]string, 0, len(demands))
	for o, d := range demands {
		if d > 0 {
			owners = append(owners, o)
		}
	}
	sort.Strings(owners)
	return owners
}

// homeRange returns the partitions [lo, hi) that owner prefers: the shares
// laid end to end in owner order. Instances that compute the same shares
// prefer disjoint partitions, so they rarely race for one, and when one
// gives partitions back it gives those that others prefer.
func homeRange(owner string, shares map[string]int) (lo, hi int) {
	owners := make([]string, 0, len(shares))
	for o := range shares {
		owners = append(owners, o)
	}
	sort.Strings(owners)
	for _, o := range owners {
		if o == owner {
			return lo, lo + shares[o]
		}
		lo += shares[o]
	}
	return lo, lo
}

// preference is owner's rendezvous score for a partition: a stable
// pseudo-random rank, different for each owner, that breaks ties outside the
// home range so that instances try different free partitions first.
func preference(owner string, partition int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(owner))
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(partition))
	h.Write(b[:])
	// fnv's low bits vary little with the last byte; a splitmix64 finish
	// spreads them.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// acquireOrder sorts the free partitions in the order owner should try
// them: its home range first, then by descending rendezvous score.
func acquireOrder(owner string, free []int, lo, hi int) []int {
	out := append([]int(nil), free...)
	sort.Slice(out, func(i, j int) bool {
		hi1, hi2 := out[i] >= lo && out[i] < hi, out[j] >= lo && out[j] < hi
		if hi1 != hi2 {
			return hi1
		}
		return preference(owner, out[i]) > preference(owner, out[j])
	})
	return out
}

// placesFirst returns order with free[lo:hi] (the places a rotation gave
// this instance among the free partitions) moved to the front.
func placesFirst(order, free []int, lo, hi int) []int {
	lo, hi = min(lo, len(free)), min(hi, len(free))
	if lo >= hi {
		return order
	}
	places := free[lo:hi]
	out := make([]int, 0, len(order))
	out = append(out, places...)
	for _, p := range order {
		if !slices.Contains(places, p) {
			out = append(out, p)
		}
	}
	return out
}

// releaseOrder sorts held partitions in the order owner should give them
// up: those outside its home range first, then the least preferred.
func releaseOrder(owner string, held []int, lo, hi int) []int {
	out := append([]int(nil), held...)
	sort.Slice(out, func(i, j int) bool {
		in1, in2 := out[i] >= lo && out[i] < hi, out[j] >= lo && out[j] < hi
		if in1 != in2 {
			return in2
		}
		return preference(owner, out[i]) < preference(owner, out[j])
	})
	return out
}
