package redislimit_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/limit/redislimit"
)

// TestPromiseMaxColdLeasesDefault: docs/limits.md's "MaxColdLeases caps
// them (default 262,144)". A store whose options leave MaxColdLeases at
// zero, deciding 263,144 fresh keys once each with 64 callers that cross
// the cap together, holds exactly 262,144 cold leases; 1,000 more keys
// decided once it is full take none (their decisions, and the decisions
// after them, go to Redis), and Redis shows exactly 262,144 states lent.
// On a Redis of its own, killed with the keys it leaves; about 5 s, 22 s
// with -race.
func TestPromiseMaxColdLeasesDefault(t *testing.T) {
	redislimit.SkipWithAllowancesForced(t)
	const bound, beyond = 262_144, 1000
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 80})
	t.Cleanup(func() { c.Close() })
	clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
	s, err := redislimit.New(c, redislimit.Options{Clock: clock, LocalAllowance: true, ColdLease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// Close would give back 262,144 leases (seconds of script time) to a
	// server about to be killed.
	t.Cleanup(func() { s.KillForTest(); _ = s.Close(context.Background()) })
	p := limit.TokenBucket(1000, limit.PerSecond(1000)).Named("tb")

	decideAll(t, s, p, "k", bound+beyond)
	if st := s.AllowanceStats(); st.ColdLeases != bound {
		t.Fatalf("after %d fresh keys: %d cold leases held (stats %+v), want %d", bound+beyond, st.ColdLeases, st, bound)
	}
	before := s.AllowanceStats()
	decideAll(t, s, p, "past", beyond)
	decideAll(t, s, p, "past", beyond)
	st := s.AllowanceStats()
	if st.ColdLeases != bound || st.ColdLocal != before.ColdLocal || st.Remote-before.Remote != 2*beyond {
		t.Fatalf("%d keys past the bound, twice each: stats %+v (before them %+v); want %d leases still, "+
			"no decision answered from one, all %d by Redis", beyond, st, before, bound, 2*beyond)
	}
	if lent := lentStates(t, c); lent != bound {
		t.Fatalf("%d states in Redis lend units, want %d", lent, bound)
	}
}

// decideAll decides keys prefix0 to prefix(n-1) once each, cost 1, with
// 64 callers; every decision must be allowed.
func decideAll(t *testing.T, s *redislimit.Store, p limit.Policy, prefix string, n int) {
	t.Helper()
	var g errgroup.Group
	var next atomic.Int64
	for range 64 {
		g.Go(func() error {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				d, err := s.AllowN(context.Background(), prefix+strconv.FormatInt(i, 10), p, 1)
				if err != nil {
					return err
				}
				if !d.Allowed {
					t.Errorf("%s%d: denied %+v", prefix, i, d)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// lentStates counts the keys of c's server whose state holds a ledger
// entry ("<state> L <holder>:<amount>:<end>:<seq>").
func lentStates(t *testing.T, c *redis.Client) int {
	t.Helper()
	ctx := context.Background()
	n := 0
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, "*", 1000).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) > 0 {
			vals, err := c.MGet(ctx, keys...).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range vals {
				if s, ok := v.(string); ok && strings.Contains(s, " L ") {
					n++
				}
			}
		}
		if cursor = next; cursor == 0 {
			return n
		}
	}
}

// TestColdLeaseCapWithCallersCrossingIt: 64 callers decide 5,000 fresh
// keys on a store capped at 1,000 cold leases; the asks in flight count
// against the cap, so the store ends with exactly 1,000 leases, and Redis
// with exactly 1,000 states lent. Counting only the leases held, callers
// that crossed the cap together each took one (1,062 held).
func TestColdLeaseCapWithCallersCrossingIt(t *testing.T) {
	const capacity = 1000
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 80})
	t.Cleanup(func() { c.Close() })
	s, err := redislimit.New(c, redislimit.Options{Clock: limittest.NewClock(time.Unix(1_700_000_000, 0)),
		LocalAllowance: true, ColdLease: time.Hour, MaxColdLeases: capacity})
	if err != nil {
		t.Fatal(err)
	}
	p := limit.TokenBucket(1000, limit.PerSecond(1000)).Named("tb")
	for round := range 3 {
		decideAll(t, s, p, "r"+strconv.Itoa(round)+"-", 5*capacity)
		if st := s.AllowanceStats(); st.ColdLeases != capacity {
			t.Fatalf("round %d: %d cold leases held (stats %+v), want %d", round, st.ColdLeases, st, capacity)
		}
		// No ask is in flight once the decisions have returned.
		if places, held := s.ColdPlacesForTest(); places != held {
			t.Fatalf("round %d: %d places taken for %d leases held", round, places, held)
		}
	}
	if lent := lentStates(t, c); lent != capacity {
		t.Fatalf("%d states in Redis lend units, want %d", lent, capacity)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if places, held := s.ColdPlacesForTest(); places != 0 || held != 0 {
		t.Fatalf("after Close: %d places taken, %d leases held; want none", places, held)
	}
	if lent := lentStates(t, c); lent != 0 {
		t.Fatalf("after Close, %d states in Redis lend units, want 0", lent)
	}
}
