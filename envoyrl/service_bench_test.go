package envoyrl

import (
	"context"
	"strconv"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// BenchmarkShouldRateLimit is one decision on the memory store with 1 and 3
// descriptors, the shape of scripts/bench-limiterd's requests.
func BenchmarkShouldRateLimit(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run(strconv.Itoa(n)+"_descriptors", func(b *testing.B) {
			store, err := NewMemoryStore(MemoryOptions{})
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			s := NewService(store, Options{})
			s.SetRules(mustRules(b, serviceRules))
			reqs := make([]*rlsv3.RateLimitRequest, 1024)
			for i := range reqs {
				ds := []string{"user", "u" + strconv.Itoa(i), "tenant", "t" + strconv.Itoa(i%100), "path", "p/x"}
				reqs[i] = request(1, desc(ds[:2*n]...))
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if _, err := s.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
