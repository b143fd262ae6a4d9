package redislimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/limit/redislimit"
)

// TestPromiseHotKeyThreshold: docs/limits.md's "A key is hot once this
// store has answered at least 4 decisions on it in each of 4 periods of
// half a lease in a row (about 16 a second for a second)", with the default
// lease (500 ms: periods of 250 ms) and the numbers written as the doc
// gives them, not read from the package. The decision after 4 busy periods
// makes the key hot (units are lent and the next decisions are local);
// after 3 busy periods, or 4 of 3 decisions, or 4 with a quiet period
// among them, it stays on the one-trip path.
func TestPromiseHotKeyThreshold(t *testing.T) {
	redislimit.SkipWithColdLeases(t, "a cold lease decides keys locally before they are hot")
	const period = 250 * time.Millisecond // half the default lease of 500 ms
	p := limit.TokenBucket(1_000_000, limit.PerSecond(1000)).Named("hot")
	for _, c := range []struct {
		name string
		busy []int // decisions in each period, one after the other
		hot  bool
	}{
		{"4 a period, 4 periods", []int{4, 4, 4, 4}, true},
		{"4 a period, 3 periods", []int{4, 4, 4}, false},
		{"3 a period, 8 periods", []int{3, 3, 3, 3, 3, 3, 3, 3}, false},
		{"4 periods with a quiet one among them", []int{4, 4, 0, 4, 4}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
			s := storesWith(t, 1, redislimit.Options{Clock: clock, LocalAllowance: true})[0]
			allow := func() {
				t.Helper()
				if d, err := s.AllowN(context.Background(), "k", p, 1); err != nil || !d.Allowed {
					t.Fatalf("%+v %v", d, err)
				}
			}
			for _, n := range c.busy {
				for range n {
					allow()
				}
				clock.Advance(period)
			}
			allow() // the first decision of the next period
			settle(t, s)
			for range 4 {
				allow()
			}
			st := s.AllowanceStats()
			if hot := st.Lent > 0 && st.Local > 0; hot != c.hot {
				t.Fatalf("decisions a period %v, then 5 in the next: hot %v (stats %+v), want %v", c.busy, hot, st, c.hot)
			}
		})
	}
}

// TestPromiseMaxAllowancesWithKeysWarmingTogether: MaxAllowances caps the
// keys with an allowance at once, also when many keys turn hot together on
// other shards: 64 callers warm 400 keys in step (4 decisions each in each
// of 4 periods), and the decisions of the fifth period make the first 8 of
// them hot and no more.
func TestPromiseMaxAllowancesWithKeysWarmingTogether(t *testing.T) {
	redislimit.SkipWithColdLeases(t, "a cold lease decides keys locally before they are hot")
	const capacity, keys = 8, 400
	p := limit.TokenBucket(1_000_000, limit.PerSecond(1000)).Named("hot")
	clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
	s := storesWith(t, 1, redislimit.Options{Clock: clock, LocalAllowance: true, MaxAllowances: capacity})[0]
	for period := range 5 {
		decideAll(t, s, p, "k", keys)
		decideAll(t, s, p, "k", keys)
		decideAll(t, s, p, "k", keys)
		decideAll(t, s, p, "k", keys)
		if period < 4 {
			clock.Advance(250 * time.Millisecond)
		}
	}
	settle(t, s)
	if counted, held := s.AllowancesForTest(); counted != capacity || held != capacity {
		t.Fatalf("%d allowances held (%d counted), want %d", held, counted, capacity)
	}
}
