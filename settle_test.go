package batcher

import (
	"testing"
	"time"
)

func TestCreditSettleSteps(t *testing.T) {
	const capacity, interval = 1000, 100 * time.Millisecond // cap: 100 cost
	c := credit{}
	steps := []struct {
		balance int64 // before, in cost
		delta   int64
		want    int64 // after, in cost
	}{
		{0, 30, -30},        // actual 30 above the estimates: a debt
		{-30, -20, -10},     // 20 below: refunded
		{50, -80, 100},      // a refund stops at the cap
		{120, -5, 120},      // above the cap already (a stretched wake-up): left alone
		{0, 0, 0},           // nothing to settle
		{0, 70_000, -60000}, // at most a minute's worth of debt
		{-70_000, 5, -70_000},
		{-70_000, -10, -69_990},
	}
	for i, st := range steps {
		c.balance = st.balance * nanoPerCost
		c.settle(st.delta, capacity, interval)
		if got := c.balance / nanoPerCost; got != st.want || c.balance%nanoPerCost != 0 {
			t.Errorf("step %d: balance %d settled %+d → %d nano-cost, want %d cost", i, st.balance, st.delta, c.balance, st.want)
		}
	}
}

func TestCostRatioSteps(t *testing.T) {
	var r costRatio
	steps := []struct {
		est, act, window uint64
		want             float64
	}{
		{0, 0, 1000, 1},           // nothing observed: 1
		{100, 200, 1000, 2},       // twice the estimates
		{100, 0, 1000, 1},         // (200+0)/(100+100)
		{1800, 900, 1000, 0.55},   // (1100)/(2000): at twice the window, not halved yet
		{2000, 2000, 1000, 0.775}, // 3100/4000, halved to 1550/2000
		{0, 5, 1000, 0.7775},
	}
	for i, st := range steps {
		r.observe(st.est, st.act, st.window)
		got := float64(r.fixed()) / ratioOne
		if d := got - st.want; d > 0.001 || d < -0.001 {
			t.Errorf("step %d: ratio %.4f, want %.4f (sums %d/%d)", i, got, st.want, r.act, r.est)
		}
	}
	r = costRatio{}
	r.observe(100, 0, 1000)
	if r.fixed() != 1 {
		t.Errorf("all actual costs 0: fixed %d, want 1 (0 means unknown)", r.fixed())
	}
}

func TestScaleTarget(t *testing.T) {
	cases := []struct {
		target int64
		ratio  uint64
		want   uint32
	}{
		{1000, 0, 1000},
		{1000, ratioOne, 1000},
		{1000, ratioOne * 3 / 2, 1500},
		{1000, ratioOne / 2, 500},
		{-5, ratioOne * 2, 0},
		{1 << 40, ratioOne * 2, ^uint32(0)},
	}
	for _, c := range cases {
		if got := scaleTarget(c.target, c.ratio); got != c.want {
			t.Errorf("scaleTarget(%d, %d) = %d, want %d", c.target, c.ratio, got, c.want)
		}
	}
}

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
