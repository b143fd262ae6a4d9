package limit_test

import (
	"context"
	"math/rand"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/costwise/batcher/limit"
)

var (
	zipfOnce sync.Once
	zipfKeys []string
	zipfSeq  []int32
)

// zipfDraws returns 1,000,000 keys and 4M draws among them, Zipf(1.1), made
// once, outside the timings (the same load as bench/limitpeers).
func zipfDraws() ([]string, []int32) {
	zipfOnce.Do(func() {
		zipfKeys = make([]string, 1_000_000)
		for i := range zipfKeys {
			zipfKeys[i] = "user-" + strconv.Itoa(i)
		}
		r := rand.New(rand.NewSource(1))
		z := rand.NewZipf(r, 1.1, 1, uint64(len(zipfKeys)-1))
		zipfSeq = make([]int32, 1<<22)
		for i := range zipfSeq {
			zipfSeq[i] = int32(z.Uint64())
		}
	})
	return zipfKeys, zipfSeq
}

// BenchmarkMemoryZipf1M decides on keys drawn Zipf(1.1) among 1,000,000 from
// 64 goroutines, 100 per second with a burst of 100 per key.
func BenchmarkMemoryZipf1M(b *testing.B) {
	keys, seq := zipfDraws()
	for _, p := range []limit.Policy{limit.GCRA(limit.PerSecond(100), 100), limit.TokenBucket(100, limit.PerSecond(100))} {
		b.Run(string(p.Algorithm), func(b *testing.B) {
			m, err := limit.NewMemory(limit.MemoryOptions{MaxKeys: 2 << 20})
			if err != nil {
				b.Fatal(err)
			}
			var gid atomic.Int64
			ctx := context.Background()
			b.ReportAllocs()
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				g := int(gid.Add(1))
				for i := 0; pb.Next(); i++ {
					if _, err := m.AllowN(ctx, keys[seq[(g*7919+i)&(len(seq)-1)]], p, 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkMemoryHotKey decides on one key from 64 goroutines, 100 per
// second with a burst of 100.
func BenchmarkMemoryHotKey(b *testing.B) {
	m, err := limit.NewMemory(limit.MemoryOptions{})
	if err != nil {
		b.Fatal(err)
	}
	p := limit.GCRA(limit.PerSecond(100), 100)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := m.AllowN(ctx, "hot", p, 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
