package batcher

import (
	"testing"
	"time"
)

func TestCreditSteps(t *testing.T) {
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	type step struct {
		at       time.Duration // since t0
		capacity uint32
		spend    []uint32 // costs offered in order
		want     int      // how many of them pass
		balance  float64  // in cost units, after the step
		waiting  bool     // operations waited for credit since the last step
	}
	tests := []struct {
		name     string
		interval time.Duration
		steps    []step
	}{
		{"first call only records the time", 100 * time.Millisecond, []step{
			{0, 1000, []uint32{10}, 0, 0, false},
		}},
		{"one interval pays for exactly its worth", 100 * time.Millisecond, []step{
			{0, 1000, nil, 0, 0, false},
			{100 * time.Millisecond, 1000, []uint32{10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10}, 10, 0, false},
		}},
		{"idle time is capped at one interval", 100 * time.Millisecond, []step{
			{0, 1000, nil, 0, 0, false},
			{10 * time.Second, 1000, nil, 0, 100, false},
		}},
		{"debt of one op is repaid first", 100 * time.Millisecond, []step{
			{0, 1000, nil, 0, 0, false},
			{time.Millisecond, 1000, []uint32{500, 1}, 1, -499, false},
			{400 * time.Millisecond, 1000, []uint32{1}, 0, -100, false},
			{500 * time.Millisecond, 1000, []uint32{1}, 0, 0, false},
			{501 * time.Millisecond, 1000, []uint32{1, 1}, 1, 0, false},
		}},
		{"zero cost needs no credit", 100 * time.Millisecond, []step{
			{0, 0, nil, 0, 0, false},
			{time.Second, 0, []uint32{0, 0, 1}, 2, 0, false},
		}},
		{"a wake-up late by timer slack while waiting loses nothing", 100 * time.Millisecond, []step{
			{0, 1000, nil, 0, 0, false},
			{time.Millisecond, 1000, []uint32{101}, 1, -100, false},
			{102 * time.Millisecond, 1000, []uint32{1}, 1, 0, true},
			{204 * time.Millisecond, 1000, nil, 0, 102, true},
		}},
		{"a wake-up late by timer slack after the balance reached the cap keeps its lateness", 100 * time.Millisecond, []step{
			{0, 1000, nil, 0, 0, false},
			{100 * time.Millisecond, 1000, []uint32{50}, 1, 50, false},
			{151 * time.Millisecond, 1000, nil, 0, 101, true}, // at the cap since 150 ms
			{152 * time.Millisecond, 1000, nil, 0, 100, false},
			{155 * time.Millisecond, 1000, []uint32{50}, 1, 50, true},
			{208 * time.Millisecond, 1000, nil, 0, 100, true}, // 3 ms late: a stall
		}},
		{"a stall while waiting forfeits what accrued beyond one interval", time.Millisecond, []step{
			{0, 1000, nil, 0, 0, false},
			{time.Millisecond, 1000, []uint32{10}, 1, -9, false},
			{13 * time.Millisecond, 1000, []uint32{10, 10}, 1, -9, true},
			{20 * time.Millisecond, 1000, []uint32{1}, 0, -2, true},
			{30 * time.Millisecond, 1000, nil, 0, 1, false},
		}},
		{"a ten-second stall with a backlog leaves one interval's worth", 100 * time.Millisecond, []step{
			{0, 1000, nil, 0, 0, false},
			{100 * time.Millisecond, 1000, []uint32{100}, 1, 0, false},
			{10100 * time.Millisecond, 1000, nil, 0, 100, true},
		}},
		{"capacity change takes effect at once", 10 * time.Millisecond, []step{
			{0, 100, nil, 0, 0, false},
			{10 * time.Millisecond, 100, nil, 0, 1, false},
			{20 * time.Millisecond, 5000, nil, 0, 50, false},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c credit
			for i, s := range tc.steps {
				c.accrue(t0.Add(s.at), s.capacity, tc.interval, s.waiting)
				got := 0
				for _, cost := range s.spend {
					if !c.spend(cost) {
						break
					}
					got++
				}
				if got != s.want {
					t.Fatalf("step %d: %d ops passed, want %d", i, got, s.want)
				}
				if bal := float64(c.balance) / float64(nanoPerCost); bal != s.balance {
					t.Fatalf("step %d: balance %v, want %v", i, bal, s.balance)
				}
			}
		})
	}
}

func TestCreditReadyAt(t *testing.T) {
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	c := credit{balance: -9 * nanoPerCost, last: t0}
	at, ok := c.readyAt(1, 1000, time.Millisecond)
	if !ok || !at.Equal(t0.Add(9*time.Millisecond+time.Nanosecond)) {
		t.Fatalf("positive at %v (%v), want 9ms+1ns", at.Sub(t0), ok)
	}
	at, ok = c.readyAt(nanoPerCost, 1000, time.Millisecond)
	if !ok || !at.Equal(t0.Add(10*time.Millisecond)) {
		t.Fatalf("cost 1 at %v (%v), want 10ms", at.Sub(t0), ok)
	}
	if _, ok := c.readyAt(2*nanoPerCost, 1000, time.Millisecond); ok {
		t.Fatal("a balance above the cap can never be reached")
	}
	if _, ok := c.readyAt(1, 0, time.Millisecond); ok {
		t.Fatal("zero capacity can never pay")
	}
}

func TestCreditNoOverflow(t *testing.T) {
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	var c credit
	c.accrue(t0, ^uint32(0), 24*time.Hour, false)
	c.accrue(t0.Add(1000*time.Hour), ^uint32(0), 24*time.Hour, true)
	if c.balance <= 0 {
		t.Fatalf("balance overflowed: %d", c.balance)
	}
	saturated := c.balance
	if !c.spend(^uint32(0)) || c.balance != saturated-int64(^uint32(0))*nanoPerCost {
		t.Fatalf("spending the largest cost from a saturated balance: %d", c.balance)
	}
	c.accrue(t0.Add(2000*time.Hour), ^uint32(0), 24*time.Hour, false)
	if c.balance != saturated {
		t.Fatalf("balance after a long accrual: %d, want the cap %d", c.balance, saturated)
	}
}

// TestCreditCapacityFallsWithoutTimePassing: when the capacity falls
// between two release decisions at the same instant, the balance is cut to
// the new cap at once (to zero for a capacity of zero), so nothing of
// positive cost goes on credit earned at the old rate; a rise, or the same
// capacity again, leaves the balance as it was.
func TestCreditCapacityFallsWithoutTimePassing(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	const interval = 100 * time.Millisecond
	var c credit
	c.fill(at, 1000, interval)
	full := c.balance
	c.accrue(at, 1000, interval, false)
	if c.balance != full {
		t.Fatalf("same capacity, same instant: balance %d, want %d", c.balance, full)
	}
	c.accrue(at, 2000, interval, false)
	if c.balance != full {
		t.Fatalf("a rise at the same instant: balance %d, want %d", c.balance, full)
	}
	c.accrue(at, 500, interval, false)
	if want := satMul(500, uint64(interval)); c.balance != want {
		t.Fatalf("a fall to 500: balance %d, want %d", c.balance, want)
	}
	c.accrue(at, 0, interval, false)
	if c.balance != 0 || c.spend(10) {
		t.Fatalf("a fall to 0: balance %d and an operation of cost 10 spent it, want 0 and refused", c.balance)
	}
}

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
