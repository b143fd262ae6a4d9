package limit_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
)

// BenchmarkMemoryFlood decides on a new key per operation in a store held
// at its MaxKeys of 65,536, at 118,000 new keys per second of the fake
// clock, each key spending 1 of 30 per 20 s: the cost of making room
// (keys at rest dropped, or a lossy eviction) under a flood of new keys.
func BenchmarkMemoryFlood(b *testing.B) {
	for _, p := range []limit.Policy{
		limit.TokenBucket(30, limit.Rate{Count: 30, Period: 20 * time.Second}),
		limit.FixedWindow(30, 20*time.Second),
	} {
		b.Run(string(p.Algorithm), func(b *testing.B) {
			const maxKeys, perSecond = 65536, 118_000
			clock := limittest.NewClock(limittest.Epoch)
			m := newMemory(b, limit.MemoryOptions{MaxKeys: maxKeys, Clock: clock})
			keys := make([]string, 4*maxKeys)
			for i := range keys {
				keys[i] = "flood-" + strconv.Itoa(i)
			}
			ctx := context.Background()
			step := time.Second / perSecond
			for i := 0; i < 2*maxKeys; i++ { // past MaxKeys: every new key makes room
				clock.Advance(step)
				m.AllowN(ctx, keys[i%len(keys)], p, 1)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				clock.Advance(step)
				m.AllowN(ctx, keys[(2*maxKeys+i)%len(keys)], p, 1)
			}
			b.StopTimer()
			st := m.Stats()
			b.ReportMetric(float64(st.Evicted)/float64(st.Evicted+st.Cleaned), "lossy/dropped")
		})
	}
}
