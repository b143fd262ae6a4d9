package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/envoyrl"
	"github.com/costwise/batcher/envoyrl/redisstore"
	"github.com/costwise/batcher/internal/redistest"
)

// restartRig is three stores with allowances on one redis-server of the
// test's own, on one fake clock, and a store without them (the one-trip
// path, as envoyproxy/ratelimit sharing the counters), each behind a
// service of hourRules.
type restartRig struct {
	srv    *redistest.Server
	admin  *redis.Client
	clock  *fakeClock
	stores []*redisstore.Store
	svcs   []*envoyrl.Service // svcs[3] is the one-trip store's
	key    string             // the hot counter of the clock's hour
}

func newRestartRig(t *testing.T) *restartRig {
	t.Helper()
	r := &restartRig{srv: redistest.StartServer(t)}
	r.admin = r.srv.Client(t)
	// A clock a day ahead of the server's, so that give-backs land inside
	// their window on the server's clock.
	r.clock = newFakeClock(time.Now().Add(24 * time.Hour).Truncate(time.Hour).Add(time.Minute))
	rules, err := envoyrl.Parse([]envoyrl.File{{Name: "r.yaml", Content: []byte(hourRules)}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		st := redisstore.New(r.srv.Client(t), redisstore.Options{LocalAllowance: i < 3, Now: r.clock.Now})
		t.Cleanup(func() { st.Close() })
		s := envoyrl.NewService(st, envoyrl.Options{Now: r.clock.Now})
		s.SetRules(rules)
		r.stores, r.svcs = append(r.stores, st), append(r.svcs, s)
	}
	r.key = fmt.Sprintf("rs_hot_h_%d", r.clock.Now().Truncate(time.Hour).Unix())
	return r
}

// drive sends rounds of one hot decision to each of the services at, the
// clock moving 1 ms a round, and returns what each admitted and whether
// each refused its last 50.
func (r *restartRig) drive(t *testing.T, rounds int, at ...int) (admitted []uint64, refusing bool) {
	t.Helper()
	admitted = make([]uint64, len(at))
	run := make([]int, len(at))
	for range rounds {
		for j, i := range at {
			resp, err := r.svcs[i].ShouldRateLimit(context.Background(), req(1, "hot", "h"))
			if err != nil {
				t.Fatalf("store %d: %v", i, err)
			}
			if resp.OverallCode == rlsv3.RateLimitResponse_OK {
				admitted[j]++
				run[j] = 0
			} else {
				run[j]++
			}
		}
		r.clock.Add(time.Millisecond)
	}
	refusing = true
	for _, n := range run {
		refusing = refusing && n >= 50
	}
	return admitted, refusing
}

// counter reads the hot counter; 0 when it does not exist.
func (r *restartRig) counter(t *testing.T) uint64 {
	t.Helper()
	n, err := r.admin.Get(context.Background(), r.key).Uint64()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return n
}

// ledger reads the hot counter's ledger: each holder's units and lease,
// and the ledger's sequence.
func (r *restartRig) ledger(t *testing.T) (units, leases map[string]int64, seq int64) {
	t.Helper()
	all, err := r.admin.HGetAll(context.Background(), "{"+r.key+"}.lent").Result()
	if err != nil {
		t.Fatal(err)
	}
	units, leases = map[string]int64{}, map[string]int64{}
	for h, v := range all {
		if h == "#" {
			seq, _ = strconv.ParseInt(v, 10, 64)
			continue
		}
		u, s, _ := strings.Cut(v, ":")
		units[h], _ = strconv.ParseInt(u, 10, 64)
		leases[h], _ = strconv.ParseInt(s, 10, 64)
	}
	return units, leases, seq
}

func sum(ns []uint64) uint64 {
	var s uint64
	for _, n := range ns {
		s += n
	}
	return s
}

// TestAllowanceRedisRestartedEmpty restarts the redis-server (killed and
// started again, empty, on its port) while three stores hold units of a hot
// counter, or after they have spent its limit, and checks
// DESIGN-allowances.md's bound: the units in hand were counted in the lost
// state; spent after the restart, they are all that is admitted beyond the
// limit in the new state, and given back, they are refused (the new ledger
// has no lease of theirs), so capacity is never made from them. Nothing of
// the new state's limit is lost.
func TestAllowanceRedisRestartedEmpty(t *testing.T) {
	const limit = 1000
	all := []int{0, 1, 2}
	// holding runs the three stores until each holds units, well under the
	// limit, and returns what they hold: the counter less what was
	// admitted, as nothing was refused.
	holding := func(t *testing.T, r *restartRig) (held []uint64) {
		t.Helper()
		got, _ := r.drive(t, 60, all...)
		for _, st := range r.stores[:3] {
			held = append(held, st.HeldForTest(r.key))
		}
		if c := r.counter(t); sum(got) != 180 || c != sum(got)+sum(held) || held[0]*held[1]*held[2] == 0 {
			t.Fatalf("before the restart: admitted %v, counter %d, held %v: want 180 admitted, each store holding units, and the counter their sum", got, c, held)
		}
		return held
	}

	t.Run("units held are spent", func(t *testing.T) {
		r := newRestartRig(t)
		held := sum(holding(t, r))
		r.srv.Restart(t)
		got, refusing := r.drive(t, 1500, all...)
		after := sum(got)
		t.Logf("held %d at the restart; admitted %d after it (%v), limit %d", held, after, got, limit)
		if !refusing {
			t.Fatalf("the stores still admit after %d decisions", 3*1500)
		}
		if after > limit+held {
			t.Errorf("admitted %d after the restart, over the limit %d plus the %d units held", after, limit, held)
		}
		if after < limit {
			t.Errorf("admitted %d after the restart, under the limit %d of the new state", after, limit)
		}
	})

	t.Run("units held are not given back", func(t *testing.T) {
		r := newRestartRig(t)
		held := holding(t, r)
		_, leases, _ := r.ledger(t)
		r.srv.Restart(t)
		// Stores 1 and 2 fill the new ledger with leases until its sequence
		// passes store 0's, which then cools and gives back what it held,
		// under its old lease.
		var after uint64
		var seq int64
		for seq <= leases[r.stores[0].AllowanceHolder()] {
			got, _ := r.drive(t, 5, 1, 2)
			after += sum(got)
			_, _, seq = r.ledger(t)
		}
		before := r.counter(t)
		r.clock.Add(time.Second) // cooled: no decision for 4 periods
		r.stores[0].SweepForTest()
		r.stores[0].SweepForTest()
		x := r.stores[0].AllowanceStats()
		units, _, _ := r.ledger(t)
		if n := r.counter(t); x.Returned != 0 || n != before {
			t.Errorf("store 0 gave back under its lease of the old state: returned %d, counter %d (was %d), want 0 and the counter as it was", x.Returned, n, before)
		}
		if _, ok := units[r.stores[0].AllowanceHolder()]; ok {
			t.Errorf("store 0 has an entry in the new ledger %v without taking there", units)
		}
		if x.Forfeited != held[0] {
			t.Errorf("store 0 forfeited %d, want the %d it held", x.Forfeited, held[0])
		}
		// The new state's limit is admitted in full, and beyond it only the
		// units stores 1 and 2 held at the restart.
		got, refusing := r.drive(t, 1500, all...)
		after += sum(got)
		t.Logf("held %v at the restart; store 0's give-back under lease %d, the new ledger at %d: %d returned, %d forfeited; admitted %d after the restart, limit %d",
			held, leases[r.stores[0].AllowanceHolder()], seq, x.Returned, x.Forfeited, after, limit)
		if want := limit + held[1] + held[2]; !refusing || after != want {
			t.Errorf("admitted %d after the restart (refusing %v), want the limit %d and the %d units stores 1 and 2 held", after, refusing, limit, held[1]+held[2])
		}
	})

	t.Run("limit spent before", func(t *testing.T) {
		r := newRestartRig(t)
		// The three spend the limit; the one-trip store counts refused hits
		// beyond it, as envoyproxy/ratelimit does.
		got, refusing := r.drive(t, 1500, 0, 1, 2, 3)
		if before := sum(got); before != limit || !refusing {
			t.Fatalf("before the restart: %v admitted (refusing %v), want the limit %d", got, refusing, limit)
		}
		top := r.counter(t)
		r.srv.Restart(t)
		// The new state knows nothing of the old count: the one-trip path
		// would admit its whole limit, and so must the allowances.
		got, refusing = r.drive(t, 1500, all...)
		after := sum(got)
		t.Logf("counter %d at the restart; admitted %d after it (%v), limit %d", top, after, got, limit)
		if !refusing || after != limit {
			t.Errorf("admitted %d after the restart (refusing %v), want the new state's limit %d", after, refusing, limit)
		}
	})
}
