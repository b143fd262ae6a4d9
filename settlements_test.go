package batcher

import "testing"

func TestSettleOps(t *testing.T) {
	w := NewWatcher(noop)
	a := NewOperation(w, 10, nil, true).(*Operation)
	b := NewOperation(w, 20, nil, true).(*Operation)
	c := NewOperation(w, 30, nil, true)
	a.SetActualCost(25)
	b.SetActualCost(0)
	est, act := settleOps([]IOperation{a, b, c})
	if est != 30 || act != 25 {
		t.Fatalf("settled est %d act %d, want 30 and 25 (c reported nothing)", est, act)
	}
	if _, ok := a.ActualCost(); ok {
		t.Fatal("a report survived its settlement")
	}
	if est, act := settleOps([]IOperation{a, b}); est != 0 || act != 0 {
		t.Fatalf("settled twice: %d %d", est, act)
	}
}

// reportingOp is an operation type of a user's own that reports its actual
// cost through ActualCoster.
type reportingOp struct {
	IOperation
	actual uint32
}

func (o reportingOp) ActualCost() (uint32, bool) { return o.actual, true }

func TestSettleOpsActualCoster(t *testing.T) {
	w := NewWatcher(noop)
	ops := []IOperation{reportingOp{NewOperation(w, 10, nil, true), 4}, NewOperation(w, 7, nil, true)}
	if est, act := settleOps(ops); est != 10 || act != 4 {
		t.Fatalf("settled est %d act %d, want 10 and 4", est, act)
	}
}
