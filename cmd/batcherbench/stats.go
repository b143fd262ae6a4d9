package main

import (
	"slices"
	"sync"
	"time"
)

// percentile returns the p-th percentile (0..100) of ds by the nearest-rank
// method; ds is sorted in place. It returns 0 for no samples.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	rank := int(p/100*float64(len(ds))+0.999999) - 1
	return ds[min(max(rank, 0), len(ds)-1)]
}

// median returns the median of xs (the lower middle for an even count); xs
// is sorted in place.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return xs[(len(xs)-1)/2]
}

// windowLog records amounts (released cost) by the time they happened and
// sums them over fixed windows afterwards. It is safe for concurrent use.
type windowLog struct {
	mu      sync.Mutex
	start   time.Time
	offsets []time.Duration
	amounts []float64
}

func newWindowLog(start time.Time) *windowLog {
	return &windowLog{start: start}
}

// add records amount at time t.
func (w *windowLog) add(t time.Time, amount float64) {
	w.mu.Lock()
	w.offsets = append(w.offsets, t.Sub(w.start))
	w.amounts = append(w.amounts, amount)
	w.mu.Unlock()
}

// windows returns the sums over consecutive windows of length size, the
// first beginning at from (measured from the log's start) and the last
// ending no later than until. Partial windows are left out.
func (w *windowLog) windows(from, size, until time.Duration) []float64 {
	if size <= 0 || until < from+size {
		return nil
	}
	n := int((until - from) / size)
	sums := make([]float64, n)
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, off := range w.offsets {
		if off < from {
			continue
		}
		k := int((off - from) / size)
		if k < n {
			sums[k] += w.amounts[i]
		}
	}
	return sums
}

// spread returns the mean, min and max of xs.
func spread(xs []float64) (mean, lo, hi float64) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	lo, hi = xs[0], xs[0]
	for _, x := range xs {
		mean += x
		lo = min(lo, x)
		hi = max(hi, x)
	}
	return mean / float64(len(xs)), lo, hi
}
