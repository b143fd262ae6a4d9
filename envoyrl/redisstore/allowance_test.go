package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

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
	var hotLost uint64
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
			hotLost += limits[kind] - min(n, limits[kind])
		}
	}
	var st redisstore.AllowanceStats
	for _, s := range stores {
		x := s.AllowanceStats()
		st.Local += x.Local
		st.Takes += x.Takes
		st.Lent += x.Lent
		st.Returned += x.Returned
		st.Forfeited += x.Forfeited
	}
	t.Logf("%d decisions (hot at 5x its limit, spread at 7.5x): %d Redis commands (%.4f per decision), %d script calls (%.4f per decision); %d decided locally; hot windows admitted/limit: min %.3f, mean %.3f over %d windows; lent %d, returned %d, forfeited %d",
		total, all, float64(all)/float64(total), scripts, float64(scripts)/float64(total), st.Local, hotMin, hotSum/float64(max(hotWindows, 1)), hotWindows, st.Lent, st.Returned, st.Forfeited)
	// At 5x its limit the hot counter reaches its limit in every window:
	// what was not admitted is what was lent and not spent (a store whose
	// callers the scheduler left idle holds its units until the window
	// ends, so how much that is depends on the run).
	if hotWindows == 0 || hotLost > st.Forfeited+st.Returned {
		t.Errorf("hot descriptor: %d units not admitted over %d windows, more than the %d lent and not spent", hotLost, hotWindows, st.Forfeited+st.Returned)
	}
	if st.Local == 0 {
		t.Error("nothing was decided from an allowance")
	}
}

const hourRules = `
domain: rs
descriptors:
  - key: hot
    rate_limit: {unit: hour, requests_per_unit: 1000}
`

// holdingStore is a store holding an allowance of hourRules' counter "hot"/"h".
type holdingStore struct {
	st    *redisstore.Store
	s     *envoyrl.Service
	admin *redis.Client
	key   string // the counter
	held  uint64 // its value: the hits and the units held unspent
	clock *fakeClock
}

// read returns the store's count of h's counter (Get, as the stop option
// reads it before adding).
func (h holdingStore) read(t *testing.T) uint64 {
	t.Helper()
	c := []envoyrl.Counter{{Key: h.key, Limit: 1000, End: h.clock.Now().Truncate(time.Hour).Add(time.Hour).Unix()}}
	if err := h.st.Get(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	return c[0].Count
}

// holding starts a server and a store with allowances on a fake clock and
// sends hits requests, enough for the store to take an allowance.
func holding(t *testing.T, hits int) holdingStore {
	t.Helper()
	srv := redistest.StartServer(t)
	admin := srv.Client(t)
	clock := newFakeClock(time.Now().Truncate(time.Hour).Add(time.Minute))
	rules, err := envoyrl.Parse([]envoyrl.File{{Name: "r.yaml", Content: []byte(hourRules)}})
	if err != nil {
		t.Fatal(err)
	}
	st := redisstore.New(srv.Client(t), redisstore.Options{LocalAllowance: true, Now: clock.Now})
	s := envoyrl.NewService(st, envoyrl.Options{Now: clock.Now})
	s.SetRules(rules)
	for range hits {
		if _, err := s.ShouldRateLimit(context.Background(), req(1, "hot", "h")); err != nil {
			t.Fatal(err)
		}
	}
	key := fmt.Sprintf("rs_hot_h_%d", clock.Now().Truncate(time.Hour).Unix())
	n, _ := admin.Get(context.Background(), key).Uint64()
	if n <= uint64(hits) {
		t.Fatalf("counter %d after %d hits: no allowance was taken", n, hits)
	}
	return holdingStore{st: st, s: s, admin: admin, key: key, held: n, clock: clock}
}

// TestAllowanceGivenBackOnClose checks that Close returns what a store
// holds: the counter falls back to what was spent.
func TestAllowanceGivenBackOnClose(t *testing.T) {
	const hits = 25
	h := holding(t, hits)
	st, admin, key, held := h.st, h.admin, h.key, h.held
	st.Close()
	back, _ := admin.Get(context.Background(), key).Uint64()
	if back != hits {
		t.Errorf("counter %d after Close, want the %d hits spent", back, hits)
	}
	if x := st.AllowanceStats(); x.Returned != held-hits {
		t.Errorf("stats: %+v, want %d returned", x, held-hits)
	}
}

// TestAllowanceDecidedDuringGiveBack: a decision that arrives while Close
// is giving back the units it needs, with the rest of the limit spent
// elsewhere, waits for them; sent to Redis at once, it would find the
// counter at the limit and be refused.
func TestAllowanceDecidedDuringGiveBack(t *testing.T) {
	const hits = 25
	h := holding(t, hits)
	st, s, admin, key, held := h.st, h.s, h.admin, h.key, h.held
	// Another instance spends the rest of the limit.
	if err := admin.IncrBy(context.Background(), key, 1000-int64(held)).Err(); err != nil {
		t.Fatal(err)
	}
	var got <-chan midwayAnswer
	redisstore.SetGiveBackHookForTest(func() { got = decideMidway(s) })
	t.Cleanup(func() { redisstore.SetGiveBackHookForTest(nil) })
	st.Close()
	// The store is closed once the units are back: the decision that
	// waited for them is admitted or, as every call after Close, answered
	// ErrClosed; never refused.
	a := <-got
	switch {
	case a.err != nil && !errors.Is(a.err, redisstore.ErrClosed):
		t.Fatalf("decision during the give-back: %v, want OK or ErrClosed", a.err)
	case a.err == nil && a.resp.OverallCode != rlsv3.RateLimitResponse_OK:
		t.Errorf("decision during the give-back: %v, want OK: %d units were being given back", a.resp.OverallCode, held-hits)
	}
	base := 1000 - (held - hits)
	if n, _ := admin.Get(context.Background(), key).Uint64(); n != base && n != base+1 {
		t.Errorf("counter %d after Close, want %d, or %d with the decision counted", n, base, base+1)
	}
}

type midwayAnswer struct {
	resp *rlsv3.RateLimitResponse
	err  error
}

// decideMidway starts a decision on the hot counter, called from a
// give-back's hook, and waits long enough for one sent straight to Redis
// to come back.
func decideMidway(s *envoyrl.Service) <-chan midwayAnswer {
	got := make(chan midwayAnswer, 1)
	go func() {
		resp, err := s.ShouldRateLimit(context.Background(), req(1, "hot", "h"))
		got <- midwayAnswer{resp, err}
	}()
	time.Sleep(100 * time.Millisecond)
	return got
}

const semanticsRules = `
domain: rs
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 30}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: c
    rate_limit: {unit: second, requests_per_unit: 8}
    shadow_mode: true
`

// TestAllowanceAnswersAsOneTrip: a store with allowances, alone on its
// counters, answers every request as the memory store does (what a
// one-trip INCRBY per descriptor answers): codes, limit_remaining,
// hits_addend (0 and above the units held), several descriptors on one
// counter, StopIncrementWhenOverLimit and shadow mode, over many windows.
func TestAllowanceAnswersAsOneTrip(t *testing.T) {
	srv := redistest.StartServer(t)
	rules, err := envoyrl.Parse([]envoyrl.File{{Name: "r.yaml", Content: []byte(semanticsRules)}})
	if err != nil {
		t.Fatal(err)
	}
	var rng0 atomic.Int64
	for _, o := range []envoyrl.Options{{}, {StopIncrementWhenOverLimit: true}, {ShadowMode: true}} {
		t.Run(fmt.Sprintf("stop=%v,shadow=%v", o.StopIncrementWhenOverLimit, o.ShadowMode), func(t *testing.T) {
			// A clock ahead of the server's, so that give-backs (the sweep
			// may run) land inside their windows.
			clock := newFakeClock(time.Now().Add(24 * time.Hour).Truncate(time.Minute))
			o.Now, o.KeyPrefix = clock.Now, fmt.Sprintf("sem%d_", rng0.Add(1))
			mem, err := envoyrl.NewMemoryStore(envoyrl.MemoryOptions{Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { mem.Close() })
			st := redisstore.New(srv.Client(t), redisstore.Options{LocalAllowance: true, Now: clock.Now})
			t.Cleanup(func() { st.Close() })
			want, got := envoyrl.NewService(mem, o), envoyrl.NewService(st, o)
			want.SetRules(rules)
			got.SetRules(rules)
			rng := rand.New(rand.NewPCG(1, uint64(len(t.Name()))))
			for i := range 6000 {
				r := &rlsv3.RateLimitRequest{Domain: "rs", HitsAddend: uint32(rng.IntN(3))}
				for range 1 + rng.IntN(3) {
					d := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{
						{Key: []string{"a", "a", "a", "b", "c"}[rng.IntN(5)], Value: strconv.Itoa(rng.IntN(2))},
					}}
					if rng.IntN(8) == 0 {
						d.HitsAddend = wrapperspb.UInt64(uint64(rng.IntN(12)))
					}
					r.Descriptors = append(r.Descriptors, d)
				}
				a, err := want.ShouldRateLimit(context.Background(), r)
				if err != nil {
					t.Fatal(err)
				}
				b, err := got.ShouldRateLimit(context.Background(), r)
				if err != nil {
					t.Fatal(err)
				}
				if !proto.Equal(a, b) {
					t.Fatalf("request %d %v at %v:\nmemory     %v\nallowances %v", i, r, clock.Now(), a, b)
				}
				clock.Add(time.Duration(rng.IntN(4)) * time.Millisecond)
			}
			if st.AllowanceStats().Local == 0 {
				t.Fatal("nothing was decided from an allowance")
			}
			t.Logf("%+v", st.AllowanceStats())
		})
	}
}

// TestAllowanceGiveBack: a counter that cools is given back by the sweep
// while its window lasts, and never once the window has ended on the
// server's clock, nor twice.
func TestAllowanceGiveBack(t *testing.T) {
	srv := redistest.StartServer(t)
	admin := srv.Client(t)
	rules, err := envoyrl.Parse([]envoyrl.File{{Name: "r.yaml", Content: []byte(hourRules)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		start time.Time
		back  bool
	}{
		{"window lasting", time.Now().Add(time.Hour).Truncate(time.Hour).Add(time.Minute), true},
		{"window ended", time.Now().Add(-2 * time.Hour).Truncate(time.Hour).Add(time.Minute), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := newFakeClock(c.start)
			st := redisstore.New(srv.Client(t), redisstore.Options{LocalAllowance: true, Now: clock.Now})
			t.Cleanup(func() { st.Close() })
			s := envoyrl.NewService(st, envoyrl.Options{Now: clock.Now, KeyPrefix: strings.ReplaceAll(c.name, " ", "") + "_"})
			s.SetRules(rules)
			const hits = 25
			for range hits {
				if _, err := s.ShouldRateLimit(context.Background(), req(1, "hot", "h")); err != nil {
					t.Fatal(err)
				}
			}
			key := fmt.Sprintf("%s_rs_hot_h_%d", strings.ReplaceAll(c.name, " ", ""), c.start.Truncate(time.Hour).Unix())
			held, _ := admin.Get(context.Background(), key).Uint64()
			if held <= hits {
				t.Fatalf("counter %d after %d hits: no allowance was taken", held, hits)
			}
			clock.Add(time.Second) // cooled: no decision for 4 periods
			st.SweepForTest()
			st.SweepForTest()
			now, _ := admin.Get(context.Background(), key).Uint64()
			x := st.AllowanceStats()
			switch {
			case c.back && (now != hits || x.Returned != held-hits):
				t.Errorf("counter %d, %+v after the sweep: want %d, %d given back", now, x, hits, held-hits)
			case !c.back && (now != held || x.Returned != 0 || x.Forfeited != held-hits):
				t.Errorf("counter %d, %+v after the sweep: want it untouched at %d, %d forfeited", now, x, held, held-hits)
			}
		})
	}
}

// TestAllowanceCloseUnderLoad closes a store while callers decide on a hot
// counter: Close returns, the callers get answers or ErrClosed, none is
// refused while the units it needs are being given back, and the counter
// ends at what was admitted, whether the units were spent during Close or
// given back (no goroutine outlives it: goleak).
func TestAllowanceCloseUnderLoad(t *testing.T) {
	srv := redistest.StartServer(t)
	admin := srv.Client(t)
	// A limit the callers cannot reach: the store holds more than they
	// spend while it closes, and none of them may be refused.
	const limit = 100000
	bigRules := strings.Replace(hourRules, "requests_per_unit: 1000}", "requests_per_unit: "+strconv.Itoa(limit)+"}", 1)
	rules, err := envoyrl.Parse([]envoyrl.File{{Name: "r.yaml", Content: []byte(bigRules)}})
	if err != nil {
		t.Fatal(err)
	}
	st := redisstore.New(srv.Client(t), redisstore.Options{LocalAllowance: true})
	s := envoyrl.NewService(st, envoyrl.Options{})
	s.SetRules(rules)
	redistest.AwayFromWindowEdge(time.Hour, 10*time.Second)
	const callers = 16
	var admitted, refused atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				resp, err := s.ShouldRateLimit(context.Background(), req(1, "hot", "h"))
				if err != nil {
					var se *envoyrl.StoreError
					if !errors.As(err, &se) || !errors.Is(err, redisstore.ErrClosed) {
						t.Errorf("after Close: %v, want ErrClosed", err)
					}
					return
				}
				if resp.OverallCode == rlsv3.RateLimitResponse_OK {
					admitted.Add(1)
				} else {
					refused.Add(1)
				}
			}
		}()
	}
	for admitted.Load() < 200 {
		time.Sleep(time.Millisecond)
	}
	st.Close()
	wg.Wait()
	key := fmt.Sprintf("rs_hot_h_%d", time.Now().Truncate(time.Hour).Unix())
	n, _ := admin.Get(context.Background(), key).Int64()
	// The calls in flight when the workers stop (one per caller at most)
	// may be counted although answered ErrClosed, as without allowances.
	if x, a := st.AllowanceStats(), admitted.Load(); n < a || n > a+callers || x.Local == 0 {
		t.Errorf("counter %d after Close, %d admitted (%+v): want the admitted, and at most %d more", n, a, x, callers)
	}
	// The limit is far off: a refusal means a decision went to Redis while
	// the units it needed were still held here, being given back.
	if r := refused.Load(); r > 0 {
		t.Errorf("%d requests refused during Close, with %d of the limit's %d counted", r, n, limit)
	}
}

// TestAllowanceColdDescriptorsDoNotCrowdOut: descriptors decided once or
// twice take none of the MaxAllowances places, so a hot one still gets an
// allowance.
func TestAllowanceColdDescriptorsDoNotCrowdOut(t *testing.T) {
	srv := redistest.StartServer(t)
	admin := srv.Client(t)
	rules, err := envoyrl.Parse([]envoyrl.File{{Name: "r.yaml", Content: []byte(hourRules)}})
	if err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock(time.Now().Add(time.Hour).Truncate(time.Hour).Add(time.Minute))
	st := redisstore.New(srv.Client(t), redisstore.Options{LocalAllowance: true, Now: clock.Now, MaxAllowances: 8})
	t.Cleanup(func() { st.Close() })
	s := envoyrl.NewService(st, envoyrl.Options{Now: clock.Now})
	s.SetRules(rules)
	for i := range 100 {
		if _, err := s.ShouldRateLimit(context.Background(), req(1, "hot", "cold"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	const hits = 25
	for range hits {
		if _, err := s.ShouldRateLimit(context.Background(), req(1, "hot", "h")); err != nil {
			t.Fatal(err)
		}
	}
	key := fmt.Sprintf("rs_hot_h_%d", clock.Now().Truncate(time.Hour).Unix())
	if n, _ := admin.Get(context.Background(), key).Uint64(); n <= hits {
		t.Fatalf("counter %d after %d hits: the hot descriptor got no allowance", n, hits)
	}
}

// decided counts the counters a store is asked to decide.
type decided struct {
	envoyrl.Store
	n atomic.Uint64
}

func (d *decided) Add(ctx context.Context, counters []envoyrl.Counter) error {
	d.n.Add(uint64(len(counters)))
	return d.Store.Add(ctx, counters)
}

// TestAllowanceStatsCountEveryDecision: each counter the store decides is
// counted once, as local, as a take's or as one-trip, whether its request
// names a hot descriptor, a cold one, both or one twice.
func TestAllowanceStatsCountEveryDecision(t *testing.T) {
	srv := redistest.StartServer(t)
	clock := newFakeClock(time.Now().Truncate(time.Hour).Add(time.Minute))
	rules, err := envoyrl.Parse([]envoyrl.File{{Name: "r.yaml", Content: []byte(hourRules + `
  - key: cold
    rate_limit: {unit: hour, requests_per_unit: 1000}
`)}})
	if err != nil {
		t.Fatal(err)
	}
	st := redisstore.New(srv.Client(t), redisstore.Options{LocalAllowance: true, Now: clock.Now})
	t.Cleanup(func() { st.Close() })
	d := &decided{Store: st}
	s := envoyrl.NewService(d, envoyrl.Options{Now: clock.Now})
	s.SetRules(rules)
	for i := range 200 {
		r := req(1, "hot", "h")
		switch i % 4 {
		case 1:
			r = req(1, "hot", "h", "cold", strconv.Itoa(i))
		case 2:
			r = req(1, "hot", "h", "hot", "h")
		}
		if _, err := s.ShouldRateLimit(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		clock.Add(time.Millisecond)
	}
	x := st.AllowanceStats()
	if x.Local == 0 || x.Takes == 0 || x.Remote == 0 {
		t.Fatalf("%+v: want decisions on every path", x)
	}
	if sum, n := x.Local+x.Takes+x.Remote, d.n.Load(); sum != n {
		t.Errorf("%+v: local+takes+remote %d, want the %d counters decided", x, sum, n)
	}
}

// TestAllowanceDecidedDuringCoolingGiveBack: a decision that arrives while
// the sweep gives back the units of a series that has cooled, with the rest
// of the limit spent elsewhere, waits for them; sent to Redis at once, it
// would find the counter at the limit and be refused. After 1 s idle the
// series' rate still makes it hot (the decision takes units); after 2 s it
// does not (the decision takes the one-trip path).
func TestAllowanceDecidedDuringCoolingGiveBack(t *testing.T) {
	for _, idle := range []time.Duration{time.Second, 2 * time.Second} {
		t.Run(idle.String(), func(t *testing.T) { decidedDuringCoolingGiveBack(t, idle) })
	}
}

func decidedDuringCoolingGiveBack(t *testing.T, idle time.Duration) {
	const hits = 25
	h := holding(t, hits)
	st, s, admin, key, held := h.st, h.s, h.admin, h.key, h.held
	defer st.Close()
	if err := admin.IncrBy(context.Background(), key, 1000-int64(held)).Err(); err != nil {
		t.Fatal(err)
	}
	started := make(chan (<-chan midwayAnswer), 1)
	var once sync.Once
	redisstore.SetCoolGiveBackHookForTest(func() {
		once.Do(func() { started <- decideMidway(s) })
	})
	t.Cleanup(func() { redisstore.SetCoolGiveBackHookForTest(nil) })
	h.clock.Add(idle) // the default period is 250 ms: two idle ones cool it
	st.SweepForTest()
	var a midwayAnswer
	select {
	case got := <-started:
		a = <-got
	case <-time.After(10 * time.Second):
		t.Fatal("no sweep gave the cooled series back")
	}
	if a.err != nil || a.resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("decision during the give-back: %v %v, want OK: %d units were being given back", a.resp.GetOverallCode(), a.err, held-hits)
	}
	if x := st.AllowanceStats(); x.Returned != held-hits {
		t.Errorf("stats: %+v, want %d returned", x, held-hits)
	}
	// The decision may have taken more than its one unit, never past the limit.
	if n, _ := admin.Get(context.Background(), key).Uint64(); n < 1000-(held-hits)+1 || n > 1000 {
		t.Errorf("counter %d after the give-back and the decision, want %d to 1000", n, 1000-(held-hits)+1)
	}
}

// TestAllowanceReadDuringCoolingGiveBack: a read of a counter (Get, as
// StopIncrementWhenOverLimit makes before adding) while the sweep gives
// back a cooled series' units, and after, counts what was spent, not the
// units lent and being returned: counted, they made a request's other
// descriptors report less remaining than the counter has, and could find
// one over its limit that is not.
func TestAllowanceReadDuringCoolingGiveBack(t *testing.T) {
	const hits = 25
	h := holding(t, hits)
	st, held := h.st, h.held
	defer st.Close()
	if got := h.read(t); got != hits {
		t.Fatalf("read while holding %d units: %d, want the %d hits", held-hits, got, hits)
	}
	during := make(chan uint64, 1)
	var once sync.Once
	redisstore.SetCoolGiveBackHookForTest(func() {
		once.Do(func() { during <- h.read(t) })
	})
	t.Cleanup(func() { redisstore.SetCoolGiveBackHookForTest(nil) })
	h.clock.Add(2 * time.Second) // the default period is 250 ms: two idle ones cool it
	st.SweepForTest()
	select {
	case got := <-during:
		if got != hits {
			t.Errorf("read during the give-back of %d units: %d, want the %d hits", held-hits, got, hits)
		}
	default:
		t.Fatal("no sweep gave the cooled series back")
	}
	if got := h.read(t); got != hits {
		t.Errorf("read after the give-back: %d, want the %d hits", got, hits)
	}
	if x := st.AllowanceStats(); x.Returned != held-hits {
		t.Errorf("stats: %+v, want %d returned", x, held-hits)
	}
}

// TestAllowanceRefusedCoolingGiveBack checks a cooling give-back that Redis
// refuses (here, the store's entry gone from the ledger): the units stay
// spent in Redis, so a read after it counts them again, and the stats call
// them forfeited, not returned.
func TestAllowanceRefusedCoolingGiveBack(t *testing.T) {
	const hits = 25
	h := holding(t, hits)
	st, admin, key, held := h.st, h.admin, h.key, h.held
	defer st.Close()
	var hooked atomic.Bool
	redisstore.SetCoolGiveBackHookForTest(func() {
		if hooked.CompareAndSwap(false, true) {
			if err := admin.Del(context.Background(), "{"+key+"}.lent").Err(); err != nil {
				t.Error(err)
			}
		}
	})
	t.Cleanup(func() { redisstore.SetCoolGiveBackHookForTest(nil) })
	h.clock.Add(2 * time.Second) // two idle periods of the default 250 ms cool it
	st.SweepForTest()
	if !hooked.Load() {
		t.Fatal("no sweep gave the cooled series back")
	}
	if n, _ := admin.Get(context.Background(), key).Uint64(); n != held {
		t.Fatalf("counter %d after the refused give-back, want the %d lent kept", n, held)
	}
	if got := h.read(t); got != held {
		t.Errorf("read after the refused give-back: %d, want the %d Redis counts", got, held)
	}
	if x := st.AllowanceStats(); x.Returned != 0 || x.Forfeited != held-hits {
		t.Errorf("stats: %+v, want 0 returned, %d forfeited", x, held-hits)
	}
}
