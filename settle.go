package batcher

import (
	"sync"
	"time"
)

// ActualCoster is implemented by an operation that can tell, once its
// batch's callback has returned, what it really cost; *Operation implements
// it through SetActualCost. The batcher asks after every callback: the
// credit is then charged the difference between the actual and the
// estimated cost (Cost()), or refunded it, so the rate the datastore sees is
// the capacity however wrong the estimates; and the target it asks the rate
// limiter for is scaled by the ratio of actual to estimated cost observed
// lately. An operation that reports nothing (ok false) is settled at its
// estimate, exactly as before.
type ActualCoster interface {
	ActualCost() (cost uint32, ok bool)
}

const actualKnown = 1 << 32

// SetActualCost records what the operation really cost, for example the
// request charge a datastore returned for it. Call it from the watcher's
// callback, before it returns; the batcher reads it once the callback has
// returned and clears it for the next attempt. For a batch whose cost is
// known only as a whole, set it on one operation and 0 on the others. It is
// safe for concurrent use.
func (o *Operation) SetActualCost(cost uint32) {
	o.actual.Store(actualKnown | uint64(cost))
}

// ActualCost returns the cost set by SetActualCost and true, or 0 and false
// when none was set since the batcher last settled the operation.
func (o *Operation) ActualCost() (uint32, bool) {
	v := o.actual.Load()
	return uint32(v), v&actualKnown != 0
}

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

// maxSettleDebt bounds the debt that reported costs may run up: however
// far off an estimate was, the batcher holds back at most this long.
const maxSettleDebt = time.Minute

// settle charges the credit delta units of cost that released operations
// cost beyond what was spent for them at release (a negative delta refunds
// them). A refund never lifts the balance above the cap, capacity ×
// interval, since idle capacity is not banked either; a charge never takes
// the balance below maxSettleDebt's worth of capacity, or below where it
// already is.
func (c *credit) settle(delta int64, capacity uint32, interval time.Duration) {
	if delta == 0 {
		return
	}
	limit := satMul(uint64(capacity), uint64(interval))
	if delta < 0 {
		refund := satMul(uint64(-delta), uint64(nanoPerCost))
		if c.balance < limit {
			c.balance = min(c.balance+refund, limit)
		}
		return
	}
	floor := min(c.balance, -satMul(uint64(capacity), uint64(maxSettleDebt)))
	charge := satMul(uint64(delta), uint64(nanoPerCost))
	c.balance = max(c.balance-charge, floor)
}

// ratioOne is the fixed-point 1.0 of costRatio.
const ratioOne = 1 << 16

// costRatio estimates actual ÷ estimated cost from settled batches, each
// weighted by its estimated cost. Both sums are halved whenever the
// estimated one passes twice the window, so the ratio follows a change
// within a few windows of cost.
//
// It is owned by the batcher's loop goroutine.
type costRatio struct {
	est, act uint64
}

// observe adds settled costs; window is in units of estimated cost.
func (r *costRatio) observe(est, act, window uint64) {
	r.est += min(est, 1<<40)
	r.act += min(act, 1<<40)
	for r.est > 2*max(window, 1) {
		r.est /= 2
		r.act /= 2
	}
}

// fixed returns the ratio × ratioOne; ratioOne when nothing was observed,
// and at least 1 once something was, so that 0 always means "unknown".
func (r *costRatio) fixed() uint64 {
	if r.est == 0 {
		return ratioOne
	}
	return max(r.act*ratioOne/r.est, 1)
}

// scaleTarget returns target × ratio (a costRatio.fixed value; 0 means 1),
// saturating at the largest uint32.
func scaleTarget(target int64, ratio uint64) uint32 {
	if target <= 0 {
		return 0
	}
	if ratio == 0 || ratio == ratioOne {
		return clampU32(target)
	}
	v := satMulU(uint64(target), ratio) / ratioOne
	return clampU32(int64(min(v, 1<<32)))
}

// applySettled takes the costs reported by the callbacks that returned
// since the last time (see ActualCoster): the credit is charged or refunded
// the difference, and the ratio that scales the target is updated.
func (l *loop) applySettled() {
	est, act := l.b.settled.take()
	if est == 0 && act == 0 {
		return
	}
	if l.cfg.limiter != nil {
		l.credit.settle(int64(min(act, 1<<40))-int64(min(est, 1<<40)), l.capacity, l.cfg.flushInterval)
	}
	l.ratio.observe(est, act, max(uint64(l.capacity), 1000))
	l.b.costRatio.Store(l.ratio.fixed())
}
