package redislimit_test

import (
	"context"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/redislimit"
	"github.com/redis/go-redis/v9"
)

// BenchmarkColdSpend: decisions of one store on 100,000 keys, each with a
// cold lease (far from its limit), drawn Zipf(1.1) by 32 goroutines per
// processor after 3.2 M decisions of warm-up (every lease renewed and sized
// from its rate); beside the memory store on the same draws. The cost of a
// spend from a cold lease against a decision of the memory store, and the
// early renewals a steady load sends (AllowanceStats in the log):
//
//	go test -run '^$' -bench ColdSpend -benchtime 5000000x ./limit/redislimit/
func BenchmarkColdSpend(b *testing.B) {
	srv := redistest.StartServer(b)
	p := limit.TokenBucket(1_000_000, limit.PerSecond(1_000_000)).Named("c")
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	for _, mode := range []string{"cold", "memory"} {
		b.Run(mode, func(b *testing.B) {
			s := coldOrMemory(b, srv.Addr(), mode, 30*time.Second)
			for _, k := range keys {
				if _, err := s.AllowN(context.Background(), k, p, 1); err != nil {
					b.Fatal(err)
				}
			}
			var seed atomic.Uint64
			// run decides on keys drawn Zipf(1.1) while more reports true.
			run := func(more func() bool) {
				z := rand.NewZipf(rand.New(rand.NewPCG(seed.Add(1), 7)), 1.1, 1, uint64(len(keys)-1))
				for more() {
					if _, err := s.AllowN(context.Background(), keys[z.Uint64()], p, 1); err != nil {
						b.Error(err)
						return
					}
				}
			}
			var wg sync.WaitGroup
			for range 64 { // the leases renewed and sized from their rate
				wg.Add(1)
				go func() {
					defer wg.Done()
					n := 0
					run(func() bool { n++; return n <= 50_000 })
				}()
			}
			wg.Wait()
			if rs, ok := s.(*redislimit.Store); ok {
				b.Logf("warm: %+v", rs.AllowanceStats())
			}
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) { run(pb.Next) })
			b.StopTimer()
			if rs, ok := s.(*redislimit.Store); ok {
				b.Logf("%+v", rs.AllowanceStats())
			}
		})
	}
}

// BenchmarkColdSpendByKeys: what a spend from a cold lease costs beside a
// decision of the memory store as the keys grow: one store, every key
// leased (5-min leases, a limit of 10⁹/s that no key comes near), two
// goroutines deciding keys drawn Zipf(1.1) ahead of time (so that no draw
// is timed); over 1,000, 10,000 and 100,000 keys. Before the timer starts,
// every key is decided coldFirst times in turn, so that its first lease
// (a few units) is spent and the next one sized from its rate, and then 2 M
// decisions each are made on the draws. The timed decisions must all be
// answered from the leases, all but one in 10,000 (the benchmark fails
// otherwise); the one-trip decisions and the early renewals they start are
// reported per decision (one-trip/op, renewals/op).
//
//	go test -run '^$' -bench ColdSpendByKeys -benchtime 4000000x ./limit/redislimit/
func BenchmarkColdSpendByKeys(b *testing.B) {
	srv := redistest.StartServer(b)
	p := limit.TokenBucket(1_000_000_000, limit.PerSecond(1_000_000_000)).Named("c")
	for _, n := range []int{1_000, 10_000, 100_000} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = "k" + strconv.Itoa(i)
		}
		draws := zipfDraws(n, 2, 1<<22)
		for _, mode := range []string{"cold", "memory"} {
			b.Run(strconv.Itoa(n)+"/"+mode, func(b *testing.B) {
				s := coldOrMemory(b, srv.Addr(), mode, 5*time.Minute)
				var wg sync.WaitGroup
				for g := range 2 { // each key's first lease spent, the next sized
					wg.Go(func() {
						for range 8 {
							for i := g; i < len(keys); i += 2 {
								if _, err := s.AllowN(context.Background(), keys[i], p, 1); err != nil {
									b.Error(err)
									return
								}
							}
						}
					})
				}
				wg.Wait()
				// run makes n decisions on the keys of draws[g].
				run := func(g, n int) {
					d := draws[g]
					for i := range n {
						if _, err := s.AllowN(context.Background(), keys[d[i&(len(d)-1)]], p, 1); err != nil {
							b.Error(err)
							return
						}
					}
				}
				for g := range draws {
					wg.Go(func() { run(g, 1<<21) })
				}
				wg.Wait()
				rs, _ := s.(*redislimit.Store)
				var before redislimit.AllowanceStats
				if rs != nil {
					before = rs.AllowanceStats()
				}
				b.ResetTimer()
				for g := range draws {
					wg.Go(func() { run(g, b.N/len(draws)) })
				}
				wg.Wait()
				b.StopTimer()
				// With b.N below the streams' count (-benchtime 1x) no
				// decision was timed: nothing to check or report.
				if n := int64(b.N / len(draws) * len(draws)); rs != nil && n > 0 {
					st := rs.AllowanceStats()
					if local := st.ColdLocal - before.ColdLocal; local < n-n/10_000 {
						b.Fatalf("%d of %d decisions answered from cold leases (%d one-trip): the benchmark measures the spend from a lease",
							local, n, st.Remote-before.Remote)
					}
					b.ReportMetric(float64(st.Remote-before.Remote)/float64(n), "one-trip/op")
					b.ReportMetric(float64(st.ColdRenewals-before.ColdRenewals)/float64(n), "renewals/op")
				}
			})
		}
	}
}

// zipfDraws returns streams streams of size indexes below n, drawn
// Zipf(1.1) ahead of time, so that no draw is timed; stream g is seeded g.
func zipfDraws(n, streams, size int) [][]int32 {
	draws := make([][]int32, streams)
	for g := range draws {
		z := rand.NewZipf(rand.New(rand.NewPCG(uint64(g), 7)), 1.1, 1, uint64(n-1))
		draws[g] = make([]int32, size)
		for i := range draws[g] {
			draws[g][i] = int32(z.Uint64())
		}
	}
	return draws
}

// coldOrMemory is a memory store, or a Redis store on addr with local
// allowances and every decision's key leased cold for lease (any other
// mode; a lease of 0 leases none, so keys are lent only once hot).
func coldOrMemory(b *testing.B, addr, mode string, lease time.Duration) limit.Store {
	if mode == "memory" {
		m, err := limit.NewMemory(limit.MemoryOptions{})
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 80})
	b.Cleanup(func() { c.Close() })
	rs, err := redislimit.New(c, redislimit.Options{Prefix: "cb" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":",
		LocalAllowance: true, ColdLease: lease})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rs.Close(context.Background()) })
	return rs
}

// BenchmarkColdLatency: the latency of decisions spent from cold leases
// beside the memory store's, in one process: 100,000 keys drawn Zipf(1.1)
// ahead of time, 1-min leases (the hot-key scenario's) and a limit of
// 10⁹/s that no key comes near, 8 goroutines per processor deciding
// without pause (so that no processor idles, as in the scenario's
// workers), after 2^19 decisions each of warm-up. It reports the
// quantiles of the timed decisions (each between two clock reads, which
// both stores pay), the early renewals and the one-trip decisions per
// decision, and fails when more than 1 in 1,000 timed decisions went
// one-trip: it measures the spend from a lease.
//
//	go test -run '^$' -bench ColdLatency -benchtime 8000000x ./limit/redislimit/
func BenchmarkColdLatency(b *testing.B) {
	srv := redistest.StartServer(b)
	p := limit.TokenBucket(1_000_000_000, limit.PerSecond(1_000_000_000)).Named("c")
	const nkeys = 100_000
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	draws := zipfDraws(nkeys, 8*runtime.GOMAXPROCS(0), 1<<20)
	for _, mode := range []string{"cold", "memory"} {
		b.Run(mode, func(b *testing.B) {
			s := coldOrMemory(b, srv.Addr(), mode, time.Minute)
			// run makes n decisions on the keys of draws[g], their
			// latencies into lat when it is not nil.
			run := func(g, n int, lat []int32) {
				d := draws[g]
				for i := range n {
					t0 := time.Now()
					if _, err := s.AllowN(context.Background(), keys[d[i&(len(d)-1)]], p, 1); err != nil {
						b.Error(err)
						return
					}
					if lat != nil {
						lat[i] = int32(min(time.Since(t0), math.MaxInt32))
					}
				}
			}
			var wg sync.WaitGroup
			for g := range draws {
				wg.Go(func() { run(g, 1<<19, nil) })
			}
			wg.Wait()
			rs, _ := s.(*redislimit.Store)
			var before redislimit.AllowanceStats
			if rs != nil {
				before = rs.AllowanceStats()
			}
			per := b.N / len(draws)
			lats := make([]int32, per*len(draws))
			b.ResetTimer()
			for g := range draws {
				wg.Go(func() { run(g, per, lats[g*per:(g+1)*per]) })
			}
			wg.Wait()
			b.StopTimer()
			if len(lats) == 0 {
				return
			}
			slices.Sort(lats)
			for _, q := range []struct {
				name string
				f    float64
			}{{"p90-ns", 0.9}, {"p99-ns", 0.99}, {"p99.5-ns", 0.995}, {"p99.9-ns", 0.999}} {
				b.ReportMetric(float64(lats[int(q.f*float64(len(lats)-1))]), q.name)
			}
			if rs != nil {
				st := rs.AllowanceStats()
				n := int64(len(lats))
				if remote := st.Remote - before.Remote; remote > n/1000 {
					b.Fatalf("%d of %d decisions one-trip: the benchmark measures the spend from a lease", remote, n)
				}
				b.ReportMetric(float64(st.Remote-before.Remote)/float64(n), "one-trip/op")
				b.ReportMetric(float64(st.ColdRenewals-before.ColdRenewals)/float64(n), "renewals/op")
			}
		})
	}
}
