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

// path is what a benchmark claims to measure, checked against the
// decisions every call got.
type path int

const (
	admitted path = iota // every call admitted
	denied               // every call denied, but the refill over the run
	mixed                // whatever the limit gives: only reported
)

func (p path) String() string { return [...]string{"admitted", "denied", "mixed"}[p] }

// tally counts one run's decisions.
type tally struct{ admitted, denied, failed int64 }

// check reports the decisions of a run and fails the benchmark when they
// are not those of the path it claims: on the admitted path a denial
// beyond one call in 10,000; on the denied path more admissions than l's
// burst and its refill over the run, with one second of slack for the
// peers that count in fixed windows.
func check(b *testing.B, p path, l Limit, t tally, elapsed time.Duration) {
	b.Helper()
	n := t.admitted + t.denied + t.failed
	b.ReportMetric(100*float64(t.denied)/float64(n), "%denied")
	b.ReportMetric(100*float64(t.failed)/float64(n), "%failed")
	switch p {
	case admitted:
		if t.denied*10_000 > n {
			b.Fatalf("%d of %d calls denied on the admitted path", t.denied, n)
		}
	case denied:
		if most := l.Burst + int64(float64(l.PerSecond)*(elapsed.Seconds()+1)); t.admitted > most {
			b.Fatalf("%d of %d calls admitted on the denied path, where %d may be in %v", t.admitted, n, most, elapsed)
		}
	}
}

// run spreads b.N calls of peer over the goroutines, key(g, i) giving the
// key of goroutine g's i-th call, and checks that the calls took path p.
// Each goroutine counts its decisions on its own, so that counting adds no
// contention to what is measured.
func run(b *testing.B, peer Peer, p path, l Limit, key func(g, i int) string) {
	var total tally
	var mu sync.Mutex
	var gid atomic.Int64
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(parallelism())
	start := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		g := int(gid.Add(1))
		var t tally
		for i := 0; pb.Next(); i++ {
			switch ok, err := peer.Allow(ctx, key(g, i)); {
			case err != nil:
				t.failed++
			case ok:
				t.admitted++
			default:
				t.denied++
			}
		}
		mu.Lock()
		total.admitted += t.admitted
		total.denied += t.denied
		total.failed += t.failed
		mu.Unlock()
	})
	b.StopTimer()
	check(b, p, l, total, time.Since(start))
}

// spend takes key's burst from peer, so that the calls after it are
// denied but for the refill.
func spend(b *testing.B, peer Peer, l Limit, key string) {
	for range 2*l.Burst + 10 {
		ok, err := peer.Allow(context.Background(), key)
		if err != nil {
			b.Fatal(err)
		}
		if !ok {
			return
		}
	}
	b.Fatalf("%s: %s still admitted after %d calls", peer.Name, key, 2*l.Burst+10)
}

// BenchmarkHotKey has every goroutine call on one key: admitted, with a
// limit no run reaches, and denied, at 100 per second with a burst of 100
// spent before the timing. The two paths differ in cost: a denial changes
// no state, so a store may decide it by reading alone.
func BenchmarkHotKey(b *testing.B) {
	hot := func(int, int) string { return "hot" }
	for _, mk := range MemoryPeers() {
		name := mk(Limited).Name
		b.Run("admitted/"+name, func(b *testing.B) {
			peer := mk(Unlimited)
			defer peer.Close()
			run(b, peer, admitted, Unlimited, hot)
		})
		b.Run("denied/"+name, func(b *testing.B) {
			peer := mk(Limited)
			defer peer.Close()
			spend(b, peer, Limited, "hot")
			run(b, peer, denied, Limited, hot)
		})
	}
}

// BenchmarkZipf1M draws keys from 1M by Zipf(1.1): admitted, with a limit
// no run reaches, and at 100 per second with a burst of 100, where the
// share of denials (reported) depends on how many calls a peer makes. Each
// peer holds every key before the timing (one call each), so that what is
// measured is decisions on held keys, not how many keys a run of b.N calls
// happens to add, which would change with the machine's speed. With -short
// the keys are not added first (a quick check that every peer runs).
func BenchmarkZipf1M(b *testing.B) {
	keys, seq := zipf()
	key := func(g, i int) string { return keys[seq[(g*7919+i)&(len(seq)-1)]] }
	for _, c := range []struct {
		name string
		p    path
		l    Limit
	}{{"admitted", admitted, Unlimited}, {"limited", mixed, Limited}} {
		for _, mk := range MemoryPeers() {
			peer := mk(c.l)
			if !testing.Short() {
				hold(b, peer, keys)
			}
			b.Run(c.name+"/"+peer.Name, func(b *testing.B) { run(b, peer, c.p, c.l, key) })
			peer.Close()
		}
	}
}

// hold makes one call on every key, so that peer holds them all.
func hold(b *testing.B, peer Peer, keys []string) {
	for _, k := range keys {
		if _, err := peer.Allow(context.Background(), k); err != nil {
			b.Fatalf("%s: %v", peer.Name, err)
		}
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
		b.Run(mk(Limited).Name, func(b *testing.B) {
			for range b.N {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				peer := mk(Limited)
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

// BenchmarkRedis has 64 callers decide on 100,000 keys drawn uniformly at
// 100 per second with a burst of 100, and reports decisions/s, the p99
// latency and the Redis commands per decision. Each key sees a few calls a
// second, so every call is admitted, which the benchmark checks.
func BenchmarkRedis(b *testing.B) {
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	for _, mk := range RedisPeers() {
		c := redisClient(b)
		peer := mk(c, Limited)
		b.Run(peer.Name, func(b *testing.B) {
			var h histogram
			var total tally
			var mu sync.Mutex
			var gid atomic.Int64
			ctx := context.Background()
			cmds := commands(b, c)
			b.ReportAllocs()
			b.SetParallelism(parallelism())
			start := time.Now()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				r := rand.New(rand.NewSource(gid.Add(1)))
				var t tally
				for pb.Next() {
					k := keys[r.Intn(len(keys))]
					t0 := time.Now()
					switch ok, err := peer.Allow(ctx, k); {
					case err != nil:
						t.failed++
					case ok:
						t.admitted++
					default:
						t.denied++
					}
					h.add(time.Since(t0))
				}
				mu.Lock()
				total.admitted += t.admitted
				total.denied += t.denied
				total.failed += t.failed
				mu.Unlock()
			})
			b.StopTimer()
			elapsed := time.Since(start)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
			b.ReportMetric(float64(h.quantile(0.99))/1e6, "p99-ms")
			b.ReportMetric(float64(commands(b, c)-cmds-1)/float64(b.N), "cmds/op")
			check(b, admitted, Limited, total, elapsed)
		})
		c.Close()
	}
}
