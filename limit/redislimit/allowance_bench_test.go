package redislimit_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/redislimit"
	"github.com/redis/go-redis/v9"
)

// Benchmarks of local allowances on a redis-server of their own (so that
// INFO commandstats counts only them): 3 stores (holders), 64 callers each.
//
//	go test -run '^$' -bench 'Allowance' -benchtime 300000x ./limit/redislimit/

const (
	benchStores  = 3
	benchCallers = 64
	benchSlot    = 250 * time.Millisecond // the span of benchLoad's counts
)

// benchCommands is the number of commands the server has run, INFO aside.
func benchCommands(b *testing.B, c *redis.Client) int64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	total := int64(0)
	for _, line := range strings.Split(info, "\n") {
		_, rest, ok := strings.Cut(line, ":calls=")
		if !ok || strings.HasPrefix(line, "cmdstat_info") {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		v, _ := strconv.ParseInt(n, 10, 64)
		total += v
	}
	return total
}

// benchLoad runs n decisions (or, with n 0, decisions for d) of cost 1 from
// benchCallers goroutines per store on keys from next, and returns their
// latencies and the admissions per benchSlot from its start.
func benchLoad(b *testing.B, stores []limit.Store, p limit.Policy, n int64, d time.Duration,
	next func(z *rand.Zipf) string) (lat []time.Duration, slots []int64) {
	var left atomic.Int64
	left.Store(n)
	start := time.Now()
	stop := start.Add(d)
	var bySlot [64]atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range len(stores) * benchCallers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[i%len(stores)]
			z := rand.NewZipf(rand.New(rand.NewPCG(uint64(i), 11)), 1.1, 1, 99_999)
			var mine []time.Duration
			for k := 0; ; k++ {
				if n > 0 && left.Add(-1) < 0 {
					break
				}
				if n == 0 && k%64 == 0 && time.Now().After(stop) {
					break
				}
				t0 := time.Now()
				dec, err := s.AllowN(context.Background(), next(z), p, 1)
				el := time.Since(t0)
				if err != nil {
					b.Error(err)
					return
				}
				if j := int(t0.Sub(start) / benchSlot); dec.Allowed && j < len(bySlot) {
					bySlot[j].Add(1)
				}
				mine = append(mine, el)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	for i := range bySlot {
		slots = append(slots, bySlot[i].Load())
	}
	return lat, slots
}

func p99(lat []time.Duration) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	return lat[len(lat)*99/100]
}

func benchStoresOn(b *testing.B, srv *redistest.Server, on bool) []limit.Store {
	stores := make([]limit.Store, benchStores)
	prefix := fmt.Sprintf("bench%d:", time.Now().UnixNano())
	for i := range stores {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 80})
		b.Cleanup(func() { c.Close() })
		s, err := redislimit.New(c, redislimit.Options{Prefix: prefix, LocalAllowance: on})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close(context.Background()) })
		stores[i] = s
	}
	return stores
}

func logStats(b *testing.B, stores []limit.Store) {
	for i, s := range stores {
		if rs, ok := s.(*redislimit.Store); ok {
			b.Logf("store %d: %+v", i, rs.AllowanceStats())
		}
	}
}

// BenchmarkAllowanceZipf: keys Zipf(1.1) over 100,000, every key a token
// bucket of 50 refilled at 50/s, so that the hottest keys run at their
// limit; without allowances, with them, and the memory store for latency.
func BenchmarkAllowanceZipf(b *testing.B) {
	srv := redistest.StartServer(b)
	admin := srv.Client(b)
	p := limit.TokenBucket(50, limit.PerSecond(50)).Named("z")
	key := func(z *rand.Zipf) string { return "k" + strconv.FormatUint(z.Uint64(), 10) }
	for _, mode := range []string{"off", "on", "memory"} {
		b.Run(mode, func(b *testing.B) {
			var stores []limit.Store
			if mode == "memory" {
				m, err := limit.NewMemory(limit.MemoryOptions{})
				if err != nil {
					b.Fatal(err)
				}
				stores = []limit.Store{m, m, m}
			} else {
				stores = benchStoresOn(b, srv, mode == "on")
			}
			benchLoad(b, stores, p, 0, 1500*time.Millisecond, key) // warm: keys turn hot
			before := benchCommands(b, admin)
			b.ResetTimer()
			t0 := time.Now()
			lat, _ := benchLoad(b, stores, p, int64(b.N), 0, key)
			el := time.Since(t0)
			b.StopTimer()
			cmds := benchCommands(b, admin) - before
			b.ReportMetric(float64(b.N)/el.Seconds(), "decisions/s")
			if mode != "memory" {
				b.ReportMetric(float64(cmds)/float64(b.N), "cmds/decision")
			}
			b.ReportMetric(float64(p99(lat).Microseconds()), "p99-µs")
			logStats(b, stores)
		})
	}
}

// BenchmarkAllowanceOneKey: every caller on one key, a token bucket of
// 1000 refilled at 1000/s, with far more demand than that. Over the middle
// 10 s of a 12 s run (the bucket emptied before), the admitted count against
// what the bucket refills, and the most admitted in one of those seconds.
// What the stores hold and what the bucket has free at either end of the
// 10 s (up to half the limit each) move the ratio by up to ±5 %.
func BenchmarkAllowanceOneKey(b *testing.B) {
	srv := redistest.StartServer(b)
	admin := srv.Client(b)
	p := limit.TokenBucket(1000, limit.PerSecond(1000)).Named("one")
	one := func(*rand.Zipf) string { return "one" }
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("allowances=%v", on), func(b *testing.B) {
			stores := benchStoresOn(b, srv, on)
			benchLoad(b, stores, p, 0, 1500*time.Millisecond, one) // warm; empties the bucket
			before := benchCommands(b, admin)
			b.ResetTimer()
			t0 := time.Now()
			lat, slots := benchLoad(b, stores, p, 0, 12*time.Second, one)
			el := time.Since(t0)
			b.StopTimer()
			cmds := benchCommands(b, admin) - before
			mid, most := int64(0), int64(0)
			for i := 4; i < 44; i += 4 {
				sec := slots[i] + slots[i+1] + slots[i+2] + slots[i+3]
				mid += sec
				most = max(most, sec)
			}
			perSec := float64(p.Rate.Count) / p.Rate.Period.Seconds()
			b.ReportMetric(float64(len(lat))/el.Seconds(), "decisions/s")
			b.ReportMetric(float64(cmds)/float64(len(lat)), "cmds/decision")
			b.ReportMetric(100*float64(mid)/(10*perSec), "admitted-%")
			b.ReportMetric(float64(most), "max-admitted/s")
			b.ReportMetric(float64(len(lat))/el.Seconds()/perSec, "demand/limit")
			b.ReportMetric(float64(p99(lat).Microseconds()), "p99-µs")
			logStats(b, stores)
		})
	}
}
