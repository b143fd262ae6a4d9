package limit_test

import (
	"context"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
)

// settleBound is a policy and what a key of it answers once spent to its
// limit and then charged far more by Settle: one more limit of debt at
// most (ResetAfter), and the retry delay of a cost of 1 then.
type settleBound struct {
	p                    limit.Policy
	wantReset, wantRetry time.Duration
}

var settleBounds = []settleBound{
	// 3 tokens at 1/s: the debt stops at 6 tokens, 6 s to rest, and one
	// token fits after 4 s.
	{limit.TokenBucket(3, limit.PerSecond(1)).Named("tb"), 6 * time.Second, 4 * time.Second},
	{limit.GCRA(limit.PerSecond(1), 3).Named("gcra"), 6 * time.Second, 4 * time.Second},
	{limit.FixedWindow(3, time.Minute).Named("fixed"), time.Minute, time.Minute},
	{limit.RollingWindow(3, 10*time.Second).Named("rolling"), 10 * time.Second, 10 * time.Second},
	// A count of 20 (not 1,010) weighs on the next window: one more fits
	// once 9/20 of the window has passed there, 15.5 s from now.
	{limit.SlidingWindow(10, 10*time.Second).Named("sliding"), 20 * time.Second, 15500 * time.Millisecond},
}

// checkSettleBounds runs, on store at a clock standing still, what the
// docs promise of Settle for every algorithm: "a refund never goes below
// rest, a charge may run one limit into debt". A key spent to its limit
// and charged 100 limits more holds one limit of debt, so a refund of two
// limits brings it back to rest exactly; a refund past rest leaves a key
// that admits its limit and no more.
func checkSettleBounds(t *testing.T, store limit.Store) {
	t.Helper()
	ctx := context.Background()
	for _, c := range settleBounds {
		p, l, key := c.p, c.p.Limit, "settle-bound"
		d, err := store.AllowN(ctx, key, p, l)
		if err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("%s: spending the limit: %+v %v", p.Name, d, err)
		}
		d, err = store.Settle(ctx, key, p, 100*l)
		if err != nil || d.Remaining != 0 || d.ResetAfter != c.wantReset {
			t.Errorf("%s: charge of 100 limits: %+v %v; want 0 remaining, ResetAfter %v (one limit of debt)", p.Name, d, err, c.wantReset)
		}
		d, err = store.AllowN(ctx, key, p, 1)
		if err != nil || d.Allowed || d.Reason != limit.ReasonLimited || d.RetryAfter != c.wantRetry {
			t.Errorf("%s: cost 1 after the charge: %+v %v; want denied, RetryAfter %v", p.Name, d, err, c.wantRetry)
		}
		d, err = store.Settle(ctx, key, p, -2*l)
		if err != nil || d.Remaining != l || d.ResetAfter != 0 {
			t.Errorf("%s: refund of two limits after the charge: %+v %v; want the key at rest (%d remaining, no ResetAfter)", p.Name, d, err, l)
		}
		d, err = store.Settle(ctx, key, p, -5*l)
		if err != nil || d.Remaining != l || d.ResetAfter != 0 {
			t.Errorf("%s: refund of 5 limits at rest: %+v %v; want the key at rest", p.Name, d, err)
		}
		if d, err = store.AllowN(ctx, key, p, l); err != nil || !d.Allowed || d.Remaining != 0 {
			t.Errorf("%s: the limit after refunds: %+v %v; want admitted, 0 remaining", p.Name, d, err)
		}
		if d, err = store.AllowN(ctx, key, p, 1); err != nil || d.Allowed {
			t.Errorf("%s: one more after the limit: %+v %v; a refund went below rest", p.Name, d, err)
		}
	}
}

func TestMemorySettleBoundsEveryAlgorithm(t *testing.T) {
	checkSettleBounds(t, newMemory(t, limit.MemoryOptions{Clock: limittest.NewClock(limittest.Epoch)}))
}
