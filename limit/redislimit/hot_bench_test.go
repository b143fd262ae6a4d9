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
// fails otherwise), and allowed or refused as the case says. The last case
// refuses amid cold leases: the store also leases 20,000 other keys cold
// (Options.ColdLease), as on a skewed mix where the hot keys are few and
// the cold table large, and the memory store holds those keys too.
//
//	go test -run '^$' -bench HotSpend -benchtime 4000000x ./limit/redislimit/
func BenchmarkHotSpend(b *testing.B) {
	srv := redistest.StartServer(b)
	for _, c := range []struct {
		name string
		p    limit.Policy
		amid int // keys leased cold beside the hot ones
	}{
		{"allowed", limit.TokenBucket(1_000_000_000, limit.PerSecond(1_000_000_000)).Named("h"), 0},
		{"refused", limit.TokenBucket(100, limit.PerHour(100)).Named("r"), 0},
		{"refused-amid-cold", limit.TokenBucket(100, limit.PerHour(100)).Named("r"), 20_000},
	} {
		benchHotSpend(b, srv, c.name, c.p, c.amid)
	}
}

// leaseCold decides amid keys under a policy no key comes near, each a few
// times: on a store with cold leases, each key's first lease is spent and
// the next one taken.
func leaseCold(b *testing.B, s limit.Store, amid int) {
	cp := limit.TokenBucket(1_000_000_000, limit.PerSecond(1_000_000_000)).Named("c")
	for i := range amid {
		for range 8 {
			if _, err := s.AllowN(context.Background(), "c"+strconv.Itoa(i), cp, 1); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func benchHotSpend(b *testing.B, srv *redistest.Server, name string, p limit.Policy, amid int) {
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
				// ColdLease 0 unless amid: every key decided here is hot,
				// decided from its allowance.
				lease := time.Duration(0)
				if amid > 0 {
					lease = 5 * time.Minute
				}
				s := coldOrMemory(b, srv.Addr(), mode, lease)
				rs, _ := s.(*redislimit.Store)
				leaseCold(b, s, amid)
				if rs != nil && rs.AllowanceStats().ColdLeases < int64(amid)*9/10 {
					b.Fatalf("%d keys leased cold of %d", rs.AllowanceStats().ColdLeases, amid)
				}
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
				refusing := p.Rate.Period == time.Hour // 100 an hour, all spent in the heat
				switch got, n := allowed.Load(), int64(b.N/len(draws)*len(draws)); {
				case refusing && got != 0:
					b.Fatalf("%d decisions allowed, want none", got)
				case !refusing && got != n:
					b.Fatalf("%d of %d decisions allowed, want every one", got, n)
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
