package limitpeers

import (
	"context"
	"math/rand"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// goroutines is the number of concurrent callers of every benchmark.
const goroutines = 64

var (
	zipfOnce sync.Once
	zipfKeys []string // 1,000,000 keys
	zipfSeq  []int32  // indexes into zipfKeys drawn Zipf(1.1)
)

// zipf pre-generates the keys and the draws, outside the timings.
func zipf() ([]string, []int32) {
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

func parallelism() int { return max(1, goroutines/runtime.GOMAXPROCS(0)) }

// run spreads b.N calls of peer over the goroutines, key(i) giving the key
// of a goroutine's i-th call, and reports the failed share.
func run(b *testing.B, peer Peer, key func(g, i int) string) {
	var failed atomic.Int64
	var gid atomic.Int64
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(parallelism())
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		g := int(gid.Add(1))
		for i := 0; pb.Next(); i++ {
			if _, err := peer.Allow(ctx, key(g, i)); err != nil {
				failed.Add(1)
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(100*float64(failed.Load())/float64(b.N), "%failed")
}

func BenchmarkHotKey(b *testing.B) {
	for _, mk := range MemoryPeers() {
		peer := mk()
		b.Run(peer.Name, func(b *testing.B) {
			run(b, peer, func(int, int) string { return "hot" })
		})
		peer.Close()
	}
}

func BenchmarkZipf1M(b *testing.B) {
	keys, seq := zipf()
	for _, mk := range MemoryPeers() {
		peer := mk()
		b.Run(peer.Name, func(b *testing.B) {
			run(b, peer, func(g, i int) string { return keys[seq[(g*7919+i)&(len(seq)-1)]] })
		})
		peer.Close()
	}
}

// BenchmarkHeapPerKey stores 200,000 keys in each peer and reports the heap
// they take, per key, after a collection.
func BenchmarkHeapPerKey(b *testing.B) {
	const n = 200_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	for _, mk := range MemoryPeers() {
		b.Run(mk().Name, func(b *testing.B) {
			for range b.N {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				peer := mk()
				for _, k := range keys {
					peer.Allow(context.Background(), k)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "B/key")
				runtime.KeepAlive(peer)
				peer.Close()
			}
		})
	}
}

// redisClient connects to BATCHER_REDIS_ADDR (default 127.0.0.1:6379).
func redisClient(b *testing.B) *redis.Client {
	addr := os.Getenv("BATCHER_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: goroutines})
	if err := c.Ping(context.Background()).Err(); err != nil {
		if os.Getenv("CI") == "true" {
			b.Fatalf("redis at %s: %v", addr, err)
		}
		b.Skipf("redis at %s: %v", addr, err)
	}
	return c
}

// commands returns the number of commands the server has run (INFO
// commandstats), less the INFO calls themselves.
func commands(b *testing.B, c *redis.Client) int64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_") || strings.HasPrefix(line, "cmdstat_info:") {
			continue
		}
		_, rest, _ := strings.Cut(line, "calls=")
		n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		total += n
	}
	return total
}

// histogram counts latencies in 10 µs buckets up to 200 ms, without
// allocating on the measured path.
type histogram [20_001]atomic.Int64

func (h *histogram) add(d time.Duration) { h[min(int(d/(10*time.Microsecond)), len(h)-1)].Add(1) }

func (h *histogram) quantile(q float64) time.Duration {
	var total int64
	for i := range h {
		total += h[i].Load()
	}
	want, seen := int64(q*float64(total)), int64(0)
	for i := range h {
		if seen += h[i].Load(); seen > want {
			return time.Duration(i+1) * 10 * time.Microsecond
		}
	}
	return 200 * time.Millisecond
}

// BenchmarkRedis has 64 callers decide on 100,000 keys drawn uniformly, and
// reports decisions/s, the p99 latency and the Redis commands per decision.
func BenchmarkRedis(b *testing.B) {
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	for _, mk := range RedisPeers() {
		c := redisClient(b)
		peer := mk(c)
		b.Run(peer.Name, func(b *testing.B) {
			var h histogram
			var failed, gid atomic.Int64
			ctx := context.Background()
			cmds := commands(b, c)
			b.ReportAllocs()
			b.SetParallelism(parallelism())
			start := time.Now()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				r := rand.New(rand.NewSource(gid.Add(1)))
				for pb.Next() {
					k := keys[r.Intn(len(keys))]
					t0 := time.Now()
					if _, err := peer.Allow(ctx, k); err != nil {
						failed.Add(1)
					}
					h.add(time.Since(t0))
				}
			})
			b.StopTimer()
			elapsed := time.Since(start)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
			b.ReportMetric(float64(h.quantile(0.99))/1e6, "p99-ms")
			b.ReportMetric(float64(commands(b, c)-cmds-1)/float64(b.N), "cmds/op")
			b.ReportMetric(100*float64(failed.Load())/float64(b.N), "%failed")
		})
		c.Close()
	}
}
