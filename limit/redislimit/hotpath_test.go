package redislimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/limit/redislimit"
)

// TestSaturatedRefusalsWriteNothing: once a saturated key's rate sample
// holds what the target needs, the decisions its allowance refuses write
// nothing that decisions on other processors read (as a refusal of the
// memory store writes nothing); the demand counted grows again with time,
// by twice the limit every 1.25 periods at most; and the next take, after
// a silence of two periods, sizes the allowance by the key's share, as it
// would have counting every refusal.
func TestSaturatedRefusalsWriteNothing(t *testing.T) {
	const lease = 2 * time.Second // a period of 1 s
	for _, p := range []limit.Policy{
		limit.TokenBucket(1000, limit.PerMinute(1000)).Named("tb"),
		limit.GCRA(limit.PerMinute(1000), 1000).Named("gcra"),
	} {
		t.Run(p.Name, func(t *testing.T) {
			clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
			s := leasedStores(t, clock, 1, lease)[0]
			warm(t, clock, []*redislimit.Store{s}, "hot", p, lease)
			ctx := context.Background()
			decide := func(n int) (allowed int) {
				t.Helper()
				for range n {
					d, err := s.AllowN(ctx, "hot", p, 1)
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						allowed++
					}
				}
				return allowed
			}
			// The bucket spent, then refusals until the demand counted
			// reaches what the sample needs (twice the limit, at this
			// instant).
			for i := 0; decide(1) == 1; i++ {
				if i > 2*int(p.Limit) {
					t.Fatal("no refusal after twice the limit")
				}
			}
			settle(t, s) // no renewal in flight or due, on the fake clock
			remote := s.AllowanceStats().Remote
			decide(2*int(p.Limit) + 1)
			settle(t, s)
			before, ok := s.SharedWordsForTest("hot", p)
			if !ok {
				t.Fatal("the key has no allowance")
			}
			local := s.AllowanceStats().Local
			if n := decide(1000); n != 0 {
				t.Fatalf("%d of 1000 decisions allowed on the saturated key", n)
			}
			settle(t, s)
			after, _ := s.SharedWordsForTest("hot", p)
			st := s.AllowanceStats()
			if st.Remote != remote || st.Local-local != 1000 {
				t.Fatalf("refusals: %d local (want 1000), %d one-trip since saturation (want 0)", st.Local-local, st.Remote-remote)
			}
			if after != before {
				t.Errorf("1000 refusals wrote the allowance's shared words: %v, then %v", before, after)
			}
			if before[3] > 2*p.Limit+1 {
				t.Errorf("demand counted %d at the sample's start, want at most twice the limit %d and one", before[3], p.Limit)
			}
			// 100 ms later, still refused here: the cap grew by 160 units.
			clock.Advance(100 * time.Millisecond)
			if n := decide(1000); n != 0 {
				t.Fatalf("%d of 1000 decisions allowed 100 ms later", n)
			}
			later, _ := s.SharedWordsForTest("hot", p)
			if grew := later[3] - before[3]; grew < 159 || grew > 161 {
				t.Errorf("demand counted grew by %d in 100 ms of refusals, want 160 (twice the limit every 1.25 s)", grew)
			}
			// The next take: the target is the key's share, half the limit
			// for a lone holder.
			clock.Advance(lease)
			decide(1)
			if got := s.TargetForTest("hot", p); got != p.Limit/2 {
				t.Errorf("target after the next take %d, want the share %d", got, p.Limit/2)
			}
		})
	}
}
