package main

import (
	"math"
	"slices"
	"time"

	"github.com/costwise/batcher/internal/fairness"
)

// This file holds the arithmetic of the scale scenario, apart from any
// store or clock so that it is tested as tables: the fair shares the
// instances should converge to, when they have, and the bookkeeping of the
// capacity each instance held over time.

// fairLevels returns the max-min fair share of p partitions among demands
// (in partitions), as real numbers: no instance gets more than it asks for
// and what the modest ones leave is split evenly among the rest. The
// shares are what a perfect divider of the capacity would give; whole
// partitions can only approximate them.
func fairLevels(p int, demands []int) []float64 {
	shares := make([]float64, len(demands))
	order := make([]int, 0, len(demands))
	for i, d := range demands {
		if d > 0 {
			order = append(order, i)
		}
	}
	// Serve the modest demands first: each gets the smaller of its demand
	// and an even split of what is left among those not served yet.
	slices.SortFunc(order, func(a, b int) int { return demands[a] - demands[b] })
	left := float64(p)
	for k, i := range order {
		even := left / float64(len(order)-k)
		shares[i] = math.Min(float64(demands[i]), even)
		left -= shares[i]
	}
	return shares
}

// settled reports whether the partitions held match the fair shares of p
// among demands. When every instance that wants capacity is due at least
// one partition, each must hold its share give or take one partition
// (|held - share| ≤ 1: a share of 3.9 is held as 3 or 4, a share of 5 as
// 4, 5 or 6) and no more than it wants. When more instances want capacity
// than there are partitions (shares below one), no instance can hold its
// share at any one moment: then settled means every partition wanted is
// held and nobody holds more than one.
func settled(p int, demands, held []int) bool {
	shares := fairLevels(p, demands)
	total, wanted, most := 0, 0, 0
	fractional := false
	for i, s := range shares {
		total += held[i]
		wanted += demands[i]
		most = max(most, held[i])
		if demands[i] > 0 && s < 1 {
			fractional = true
		}
	}
	if fractional {
		return total == min(p, wanted) && most <= 1
	}
	for i, s := range shares {
		h := float64(held[i])
		if h < s-1-1e-9 || h > s+1+1e-9 || held[i] > demands[i] {
			return false
		}
	}
	return true
}

// heldLog integrates what each instance held over time, sample by sample:
// partition-seconds per instance per bucket of time (for Jain's index over
// windows made of whole buckets), the total (for utilisation), and the
// partition-seconds lost: partitions idle while an instance wanted more
// than it held. A sample stands for the time since the previous one. It is
// not safe for concurrent use.
type heldLog struct {
	p       int
	bucket  time.Duration
	last    time.Duration   // offset of the previous sample
	buckets [][]float64     // [bucket][instance] partition-seconds
	held    float64         // partition-seconds held in all
	lost    float64         // partition-seconds idle while wanted
	span    time.Duration   // time covered by samples
	minUse  float64         // lowest utilisation of one sample
	spans   []time.Duration // time covered per bucket
}

// newHeldLog returns a log for p partitions whose first sample will stand
// for the time since start offset 0, with buckets of the given length.
func newHeldLog(p int, bucket time.Duration) *heldLog {
	return &heldLog{p: p, bucket: bucket, minUse: 1}
}

// add records a sample taken at offset at: held and demands are per
// instance, in partitions. Samples must come in time order.
func (l *heldLog) add(at time.Duration, held, demands []int) {
	dt := (at - l.last).Seconds()
	l.last = at
	if dt <= 0 {
		return
	}
	k := int(at / l.bucket)
	if at%l.bucket == 0 && k > 0 {
		k-- // a sample at a bucket's end belongs to the bucket it closes
	}
	for len(l.buckets) <= k {
		l.buckets = append(l.buckets, make([]float64, len(held)))
		l.spans = append(l.spans, 0)
	}
	total, unmet := 0, 0
	for i, h := range held {
		l.buckets[k][i] += float64(h) * dt
		total += h
		unmet += max(demands[i]-h, 0)
	}
	l.spans[k] += time.Duration(dt * float64(time.Second))
	l.held += float64(total) * dt
	l.lost += float64(min(max(l.p-total, 0), unmet)) * dt
	l.span += time.Duration(dt * float64(time.Second))
	l.minUse = min(l.minUse, float64(total)/float64(l.p))
}

// use returns the mean share of the partitions held.
func (l *heldLog) use() float64 {
	if l.span <= 0 {
		return 0
	}
	return l.held / (float64(l.p) * l.span.Seconds())
}

// lostShare returns the lost partition-seconds as a share of all the
// partition-seconds there were.
func (l *heldLog) lostShare() float64 {
	if l.span <= 0 {
		return 0
	}
	return l.lost / (float64(l.p) * l.span.Seconds())
}

// windows returns each instance's partition-seconds over windows of n
// buckets, one starting every stride buckets. Only whole buckets count: a
// last bucket that samples cover for less than 90 % of its length, as when
// the run ends a moment after a bucket began, ends the windows.
func (l *heldLog) windows(n, stride int) [][]float64 {
	if n < 1 || stride < 1 {
		return nil
	}
	whole := len(l.buckets)
	if whole > 0 && l.spans[whole-1] < l.bucket*9/10 {
		whole--
	}
	var out [][]float64
	for start := 0; start+n <= whole; start += stride {
		sums := make([]float64, len(l.buckets[start]))
		for _, b := range l.buckets[start : start+n] {
			for i, x := range b {
				sums[i] += x
			}
		}
		out = append(out, sums)
	}
	return out
}

// jainRange returns the lowest and the mean of Jain's index over windows;
// ok is false when there is none.
func jainRange(windows [][]float64) (lo, mean float64, ok bool) {
	if len(windows) == 0 {
		return 0, 0, false
	}
	lo = 1
	for _, w := range windows {
		j := fairness.Jain(w)
		lo = min(lo, j)
		mean += j
	}
	return lo, mean / float64(len(windows)), true
}
