package redislimit_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/redislimit"
)

// BenchmarkHotSpend: what a decision from a hot key's allowance costs
// beside a decision of the memory store, with the keys' lines shared by
// the processors: one store, a few keys, two goroutines deciding keys
// drawn at random ahead of time; under a limit of 10⁹/s that no key comes
// near (every decision allowed), and under 100 an hour (every timed
// decision refused: a saturated key). Before the timer starts, the keys
// are decided until each holds an allowance. The timed decisions must all
// be answered from the allowances, all but one in 10,000 (the benchmark
// fails otherwise), and allowed or refused as the case says.
//
//	go test -run '^$' -bench HotSpend -benchtime 4000000x ./limit/redislimit/
func BenchmarkHotSpend(b *testing.B) {
	srv := redistest.StartServer(b)
	for _, c := range []struct {
		name string
		p    limit.Policy
	}{
		{"allowed", limit.TokenBucket(1_000_000_000, limit.PerSecond(1_000_000_000)).Named("h")},
		{"refused", limit.TokenBucket(100, limit.PerHour(100)).Named("r")},
	} {
		benchHotSpend(b, srv, c.name, c.p)
	}
}

func benchHotSpend(b *testing.B, srv *redistest.Server, name string, p limit.Policy) {
	for _, n := range []int{1, 16} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = "hot" + strconv.Itoa(i)
		}
		var draws [2][]int32
		for g := range draws {
			r := rand.New(rand.NewPCG(uint64(g), 9))
			draws[g] = make([]int32, 1<<16)
			for i := range draws[g] {
				draws[g][i] = int32(r.IntN(n))
			}
		}
		for _, mode := range []string{"hot", "memory"} {
			b.Run(name+"/"+strconv.Itoa(n)+"/"+mode, func(b *testing.B) {
				// ColdLease 0: every key here is hot, decided from its allowance.
				s := coldOrMemory(b, srv.Addr(), mode, 0)
				rs, _ := s.(*redislimit.Store)
				var allowed atomic.Int64
				run := func(g, n int) {
					d := draws[g]
					k := int64(0)
					for i := range n {
						dec, err := s.AllowN(context.Background(), keys[d[i&(len(d)-1)]], p, 1)
						if err != nil {
							b.Error(err)
							return
						}
						if dec.Allowed {
							k++
						}
					}
					allowed.Add(k)
				}
				var wg sync.WaitGroup
				for range 3 { // heat: busy periods make the keys hot
					for g := range draws {
						wg.Go(func() { run(g, 1<<16) })
					}
					wg.Wait()
					time.Sleep(100 * time.Millisecond)
				}
				var before redislimit.AllowanceStats
				if rs != nil {
					before = rs.AllowanceStats()
				}
				allowed.Store(0)
				b.ResetTimer()
				for g := range draws {
					wg.Go(func() { run(g, b.N/len(draws)) })
				}
				wg.Wait()
				b.StopTimer()
				if want := int64(b.N / len(draws) * len(draws)); name == "refused" {
					want = 0
				} else if got := allowed.Load(); got != want {
					b.Fatalf("%d of %d decisions allowed, want every one", got, want)
				}
				if name == "refused" && allowed.Load() != 0 {
					b.Fatalf("%d decisions allowed, want none", allowed.Load())
				}
				if rs != nil {
					st := rs.AllowanceStats()
					n := int64(b.N / len(draws) * len(draws))
					if local := st.Local - st.ColdLocal - (before.Local - before.ColdLocal); local < n-n/10_000 {
						b.Fatalf("%d of %d decisions answered from hot allowances (%d one-trip): the benchmark measures the spend from an allowance",
							local, n, st.Remote-before.Remote)
					}
				}
			})
		}
	}
}
