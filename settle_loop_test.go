package batcher

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// actualPerSecond runs a harness whose watcher reports actualCost for every
// operation, with a backlog of ops operations estimated at estimate each,
// for secs seconds of fake time, and returns the actual cost released in
// each whole second.
func actualPerSecond(t *testing.T, capacity uint32, maxBatch uint32, batchable bool, estimate, actualCost uint32, ops, secs int) []uint64 {
	t.Helper()
	h := newHarness(t, func(b *Batcher) {
		b.WithRateLimiter(NewProvisionedResource(capacity)).WithCapacityInterval(time.Hour)
	})
	w := NewWatcher(func(batch []IOperation) {
		for _, op := range batch {
			op.(*Operation).SetActualCost(actualCost)
		}
	}).WithMaxBatchSize(maxBatch)
	var mu sync.Mutex
	actual := make([]uint64, secs+1)
	h.b.AddListener(func(event string, val int, msg string, md interface{}) {
		if event != BatchEvent {
			return
		}
		s := min(int(h.fc.Now().Sub(t0)/time.Second), secs)
		mu.Lock()
		actual[s] += uint64(val) * uint64(actualCost)
		mu.Unlock()
	})
	h.enqueue(w, ops, estimate, batchable)
	h.runSettled(time.Duration(secs) * time.Second)
	mu.Lock()
	defer mu.Unlock()
	return actual[:secs]
}

// TestSettleBatchAboveOneInterval: capacity 2,000/s (200 per 100-ms flush
// interval), batches of 5 operations estimated at 100 each (500, more than
// the credit can hold) whose callbacks report an actual cost of 10: the
// actual cost released per second is the capacity, as with batches of 1.
// Such a batch used to go only at a flush, one per interval: 25 % of the
// capacity.
func TestSettleBatchAboveOneInterval(t *testing.T) {
	const capacity = 2000
	perSecond := actualPerSecond(t, capacity, 5, true, 100, 10, 4000, 10)
	for s, got := range perSecond[1:] {
		if r := float64(got) / capacity; r < 0.95 || r > 1.03 {
			t.Errorf("second %d: actual cost %d, %.3f× capacity", s+1, got, r)
		}
	}
}

// TestSettleRateAcrossBatchesAndEstimates: for batch sizes from 1 to
// unbounded and estimates from half to 100 times the actual cost (the
// largest, 2,000, is ten flush intervals' worth of capacity for one
// operation), the actual cost released in every 1-s window after the first
// is 95–103 % of the capacity.
func TestSettleRateAcrossBatchesAndEstimates(t *testing.T) {
	const capacity, actualCost, secs = 2000, 20, 5
	lo, hi := 2.0, 0.0
	defer func() { t.Logf("actual cost per second %.3f–%.3f× capacity", lo, hi) }()
	for _, size := range []uint32{1, 2, 3, 5, 10, 100, 0} {
		for _, estimate := range []uint32{10, 20, 80, 200, 2000} {
			t.Run(fmt.Sprintf("batch%d_estimate%d", size, estimate), func(t *testing.T) {
				ops := (secs + 2) * capacity / actualCost
				perSecond := actualPerSecond(t, capacity, size, size != 1, estimate, actualCost, ops, secs)
				for s, got := range perSecond[1:] {
					r := float64(got) / capacity
					lo, hi = min(lo, r), max(hi, r)
					if r < 0.95 || r > 1.03 {
						t.Errorf("second %d: actual cost %d, %.3f× capacity", s+1, got, r)
					}
				}
			})
		}
	}
}
