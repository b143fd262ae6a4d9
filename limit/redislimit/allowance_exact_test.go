package redislimit_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/limit/redislimit"
)

// TestAllowanceExactUnderConcurrency: three stores (three holders) on one
// server, 64 goroutines each, decide a few hot keys and a Zipf spread of
// others, token bucket and GCRA, on a fake clock that stands still during a
// phase and moves on between phases. Every admission is logged at its
// phase's time; replayed through a bucket of the same limit and rate, per
// key, none may be refused: across the three, no interval admits more than
// the limit plus what refills in it, exactly.
func TestAllowanceExactUnderConcurrency(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
	total := exactUnderConcurrency(t, clock, leasedStores(t, clock, 3, 200*time.Millisecond))
	if total.Local == 0 || total.Lent == 0 {
		t.Fatalf("nothing was decided from an allowance: %+v", total)
	}
}

// exactUnderConcurrency runs 64 goroutines on each of stores, half on 4 hot
// keys, half on a Zipf(1.1) spread of 500 keys, for 1.6 s of clock in 5-ms
// steps, replays every admission through its bucket (failing the test on
// one over the limit), closes the stores and returns their stats, summed.
func exactUnderConcurrency(t *testing.T, clock *limittest.Clock, stores []*redislimit.Store) redislimit.AllowanceStats {
	t.Helper()
	const (
		perStore = 64
		step     = 5 * time.Millisecond
		phases   = 320 // 1.6 s: warm by 0.5 s, then 1.1 s hot
		hotKeys  = 4
		zipfKeys = 500
	)
	policies := []limit.Policy{
		limit.TokenBucket(100, limit.PerSecond(200)).Named("tb"),
		limit.GCRA(limit.PerSecond(200), 100).Named("gcra"),
	}
	type adm struct {
		at  int // phase
		key string
		p   int
	}
	var mu sync.Mutex
	var log []adm
	zipf := make([]*rand.Zipf, len(stores)*perStore)
	for i := range zipf {
		zipf[i] = rand.NewZipf(rand.New(rand.NewPCG(uint64(i), 7)), 1.1, 1, zipfKeys-1)
	}
	hotDecided := 0
	for ph := range phases {
		var wg sync.WaitGroup
		errc := make(chan error, len(zipf))
		for g := range zipf {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := stores[g%len(stores)]
				// Half the callers hammer the hot keys, half the spread.
				key := fmt.Sprintf("h%d", g/2%hotKeys)
				pi := g / 2 / hotKeys % len(policies)
				if g%2 == 1 {
					key = fmt.Sprintf("z%d", zipf[g].Uint64())
				}
				dec, err := s.AllowN(context.Background(), key, policies[pi], 1)
				if err != nil {
					errc <- err
					return
				}
				if dec.Allowed {
					mu.Lock()
					log = append(log, adm{ph, key, pi})
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Fatal(err)
		}
		hotDecided += len(zipf) / 2
		clock.Advance(step)
	}
	stats := make([]redislimit.AllowanceStats, len(stores))
	for i, s := range stores {
		stats[i] = s.AllowanceStats()
		if err := s.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}

	// Replay each (key, policy) through its bucket, in whole units as the
	// scripts count: a token weighs p units, n drain per µs.
	type kp struct {
		key string
		p   int
	}
	byKey := map[kp][]int{}
	for _, a := range log {
		byKey[kp{a.key, a.p}] = append(byKey[kp{a.key, a.p}], a.at)
	}
	stepUs := int64(step / time.Microsecond)
	hotAdmitted, hotCapacity := int64(0), int64(0)
	for k, ats := range byKey {
		sort.Ints(ats)
		pol := policies[k.p]
		per := int64(pol.Rate.Period / time.Microsecond)
		n, p := pol.Rate.Count, per // 200 per 1e6 µs: n and p need not be reduced for the replay
		capUnits := pol.Limit * p
		debt, last := int64(0), int64(0)
		for i, ph := range ats {
			now := int64(ph) * stepUs
			debt = max(0, debt-(now-last)*n)
			last = now
			debt += p
			if debt > capUnits {
				t.Fatalf("%s/%s: admission %d at %v refused by the replay: over the limit",
					k.key, pol.Name, i, time.Duration(now)*time.Microsecond)
			}
		}
		if k.key[0] == 'h' {
			hotAdmitted += int64(len(ats))
			hotCapacity += pol.Limit + int64(phases)*stepUs*n/per
		}
	}
	var total redislimit.AllowanceStats
	for _, st := range stats {
		total.Lent += st.Lent
		total.Returned += st.Returned
		total.Expired += st.Expired
		total.Local += st.Local
		total.Remote += st.Remote
		total.Commands += st.Commands
		total.Renewals += st.Renewals
		total.Background += st.Background
		total.ColdLocal += st.ColdLocal
	}
	t.Logf("hot keys: admitted %d of a capacity of %d (%.1f%%, warm-up included); %d decided",
		hotAdmitted, hotCapacity, 100*float64(hotAdmitted)/float64(hotCapacity), hotDecided)
	t.Logf("stats of the three: %+v; loss (expired unused) %d units, %.2f script calls per decision",
		total, total.Expired, float64(total.Commands)/float64(total.Local+total.Remote))
	return total
}
