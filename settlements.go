package batcher

import "sync"

// settleOps returns the estimated and the actual cost of the operations of
// a batch that reported their actual cost, and clears their reports. It
// runs on the batch's goroutine once the callback has returned.
func settleOps(ops []IOperation) (est, act uint64) {
	for _, op := range ops {
		if o, ok := op.(*Operation); ok {
			if v := o.actual.Load(); v != 0 {
				o.actual.Store(0)
				est += uint64(o.cost)
				act += uint64(uint32(v))
			}
			continue
		}
		if r, ok := op.(ActualCoster); ok {
			if c, ok := r.ActualCost(); ok {
				est += uint64(op.Cost())
				act += uint64(c)
			}
		}
	}
	return est, act
}

// settlements collects the reports of finished callbacks for the loop.
type settlements struct {
	mu       sync.Mutex // guards est and act
	est, act uint64
}

// add records one batch's reports; it is called from batch goroutines.
func (s *settlements) add(est, act uint64) {
	s.mu.Lock()
	s.est += est
	s.act += act
	s.mu.Unlock()
}

// take returns and clears what was recorded since the last take.
func (s *settlements) take() (est, act uint64) {
	s.mu.Lock()
	est, act = s.est, s.act
	s.est, s.act = 0, 0
	s.mu.Unlock()
	return est, act
}
