package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/costwise/batcher/envoyrl"
	"github.com/costwise/batcher/envoyrl/redisstore"
	"github.com/costwise/batcher/internal/redistest"
)

// TestExpirationJitter: with ExpirationJitter each new counter expires
// its TTL plus 0 to the jitter later, the counters apart; without it,
// after its TTL.
func TestExpirationJitter(t *testing.T) {
	c := redistest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const ttl, jitter = 10 * time.Second, time.Hour
	pttls := func(opts redisstore.Options) []time.Duration {
		st := redisstore.New(c, opts)
		defer st.Close()
		prefix := "jitter-" + uuid.NewString() + "-"
		counters := make([]envoyrl.Counter, 20)
		for i := range counters {
			counters[i] = envoyrl.Counter{Key: prefix + uuid.NewString(), Hits: 1, TTL: ttl}
		}
		if err := st.Add(ctx, counters); err != nil {
			t.Fatal(err)
		}
		out := make([]time.Duration, len(counters))
		for i, k := range counters {
			d, err := c.PTTL(ctx, k.Key).Result()
			if err != nil {
				t.Fatal(err)
			}
			out[i] = d
		}
		return out
	}
	for _, d := range pttls(redisstore.Options{}) {
		if d <= 0 || d > ttl {
			t.Fatalf("without jitter: PTTL %v, want (0, %v]", d, ttl)
		}
	}
	got := pttls(redisstore.Options{ExpirationJitter: jitter})
	distinct := map[time.Duration]bool{}
	longest := time.Duration(0)
	for _, d := range got {
		if d <= 0 || d > ttl+jitter {
			t.Fatalf("with jitter: PTTL %v, want (0, %v]", d, ttl+jitter)
		}
		distinct[d.Round(time.Second)] = true
		longest = max(longest, d)
	}
	// 20 draws from an hour: all within a second of each other, or all
	// within the first minute, would be a broken draw.
	if len(distinct) < 2 || longest < ttl+time.Minute {
		t.Fatalf("with jitter: PTTLs %v, want them spread over up to %v past %v", got, jitter, ttl)
	}
}
