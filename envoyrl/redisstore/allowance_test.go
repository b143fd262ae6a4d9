package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/envoyrl"
	"github.com/costwise/batcher/envoyrl/redisstore"
	"github.com/costwise/batcher/internal/redistest"
)

const allowanceRules = `
domain: rs
descriptors:
  - key: hot
    rate_limit: {unit: second, requests_per_unit: 300}
  - key: spread
    rate_limit: {unit: second, requests_per_unit: 20}
`

// fakeClock is a clock the test moves.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Add(d time.Duration) { c.ns.Add(int64(d)) }

func newFakeClock(t time.Time) *fakeClock {
	c := &fakeClock{}
	c.ns.Store(t.UnixNano())
	return c
}

// admissions counts what a store admitted per counter: a counter's key
// names its window.
type admissions struct {
	envoyrl.Store
	mu  sync.Mutex
	got map[string]uint64
}

func (a *admissions) Add(ctx context.Context, counters []envoyrl.Counter) error {
	if err := a.Store.Add(ctx, counters); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range counters {
		if c.Hits > 0 && c.Count <= c.Limit {
			a.got[c.Key] += c.Hits
		}
	}
	return nil
}

// commands is the server's count of commands run, scripts' own included,
// and of script calls.
func commands(t *testing.T, c *redis.Client) (all, scripts int64) {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		if name == "cmdstat_info" || name == "cmdstat_config|resetstat" {
			continue
		}
		all += n
		if strings.HasPrefix(name, "cmdstat_eval") {
			scripts += n
		}
	}
	return all, scripts
}

// TestAllowancesExactAcrossStores runs three stores with allowances on one
// Redis, many callers each, on one hot descriptor and on a spread of
// descriptors, the clock moved by the callers' own progress: in every
// window, what the three admit together is at most the limit.
func TestAllowancesExactAcrossStores(t *testing.T) {
	srv := redistest.StartServer(t)
	admin := srv.Client(t)
	clock := newFakeClock(time.Unix(1_800_000_000, 0))
	rules, err := envoyrl.Parse([]envoyrl.File{{Name: "r.yaml", Content: []byte(allowanceRules)}})
	if err != nil {
		t.Fatal(err)
	}
	const instances, callers, windows, steps, perStep = 3, 12, 6, 10, 300
	var (
		svcs   []*envoyrl.Service
		stores []*redisstore.Store
		seen   []*admissions
	)
	for range instances {
		st := redisstore.New(srv.Client(t), redisstore.Options{LocalAllowance: true, Now: clock.Now})
		t.Cleanup(func() { st.Close() })
		a := &admissions{Store: st, got: map[string]uint64{}}
		s := envoyrl.NewService(a, envoyrl.Options{Now: clock.Now, KeyPrefix: "x_"})
		s.SetRules(rules)
		svcs, stores, seen = append(svcs, s), append(stores, st), append(seen, a)
	}
	if err := admin.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	start := clock.Now()
	var decisions atomic.Int64
	total := int64(windows * steps * perStep)
	var wg sync.WaitGroup
	errs := make(chan error, instances*callers)
	for i := range instances {
		for j := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; ; n++ {
					d := decisions.Add(1)
					if d > total {
						return
					}
					if d%perStep == 0 {
						clock.Add(time.Second / steps)
					}
					r := req(1, "hot", "h")
					if n%2 == 1 {
						r = req(1, "spread", strconv.Itoa((i*callers+j+n)%10))
					}
					if _, err := svcs[i].ShouldRateLimit(context.Background(), r); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	all, scripts := commands(t, admin)
	sum := map[string]uint64{}
	for _, a := range seen {
		for k, n := range a.got {
			sum[k] += n
		}
	}
	limits := map[string]uint64{"hot": 300, "spread": 20}
	var hotMin, hotSum float64 = 2, 0
	hotWindows := 0
	for k, n := range sum {
		kind := strings.Split(k, "_")[2]
		if n > limits[kind] {
			t.Errorf("%s: %d admitted across the stores, over the limit %d", k, n, limits[kind])
		}
		// The first and last windows are partial.
		w, _ := strconv.ParseInt(k[strings.LastIndexByte(k, '_')+1:], 10, 64)
		if kind == "hot" && w > start.Unix() && w < start.Unix()+windows-1 {
			r := float64(n) / float64(limits[kind])
			hotMin, hotSum, hotWindows = min(hotMin, r), hotSum+r, hotWindows+1
		}
	}
	var st redisstore.AllowanceStats
	for _, s := range stores {
		x := s.AllowanceStats()
		st.Local += x.Local
		st.Takes += x.Takes
		st.Lent += x.Lent
		st.Forfeited += x.Forfeited
	}
	t.Logf("%d decisions (hot at 10x its limit, spread at 3x): %d Redis commands (%.4f per decision), %d script calls (%.4f per decision); %d decided locally; hot windows admitted/limit: min %.3f, mean %.3f over %d windows; lent %d, forfeited %d",
		total, all, float64(all)/float64(total), scripts, float64(scripts)/float64(total), st.Local, hotMin, hotSum/float64(max(hotWindows, 1)), hotWindows, st.Lent, st.Forfeited)
	if hotWindows == 0 || hotMin < 0.9 {
		t.Errorf("hot descriptor admitted %.3f of its limit at worst, want at least 0.9", hotMin)
	}
	if st.Local == 0 {
		t.Error("nothing was decided from an allowance")
	}
}

// TestAllowanceGivenBackOnClose checks that Close returns what a store
// holds: the counter falls back to what was spent.
func TestAllowanceGivenBackOnClose(t *testing.T) {
	srv := redistest.StartServer(t)
	admin := srv.Client(t)
	clock := newFakeClock(time.Now().Truncate(time.Hour).Add(time.Minute))
	rules, err := envoyrl.Parse([]envoyrl.File{{Name: "r.yaml", Content: []byte(`
domain: rs
descriptors:
  - key: hot
    rate_limit: {unit: hour, requests_per_unit: 1000}
`)}})
	if err != nil {
		t.Fatal(err)
	}
	st := redisstore.New(srv.Client(t), redisstore.Options{LocalAllowance: true, Now: clock.Now})
	s := envoyrl.NewService(st, envoyrl.Options{Now: clock.Now})
	const hits = 25
	s.SetRules(rules)
	for range hits {
		if _, err := s.ShouldRateLimit(context.Background(), req(1, "hot", "h")); err != nil {
			t.Fatal(err)
		}
	}
	key := fmt.Sprintf("rs_hot_h_%d", clock.Now().Truncate(time.Hour).Unix())
	held, _ := admin.Get(context.Background(), key).Uint64()
	if held <= hits {
		t.Fatalf("counter %d after %d hits: no allowance was taken", held, hits)
	}
	st.Close()
	back, _ := admin.Get(context.Background(), key).Uint64()
	if back != hits {
		t.Errorf("counter %d after Close, want the %d hits spent", back, hits)
	}
	if x := st.AllowanceStats(); x.Returned != held-hits {
		t.Errorf("stats: %+v, want %d returned", x, held-hits)
	}
}
