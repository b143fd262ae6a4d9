package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/envoyrl"
	"github.com/costwise/batcher/envoyrl/redisstore"
	"github.com/costwise/batcher/internal/redistest"
)

// frozenStore starts a server, a store on a client with go-redis's default
// options (no ContextTimeoutEnabled), and counts once on key so that the
// script is loaded and a connection open.
func frozenStore(t *testing.T, key string) (*redistest.Server, *redis.Client, *redisstore.Store) {
	t.Helper()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	st := redisstore.New(c, redisstore.Options{})
	t.Cleanup(func() { st.Close() })
	if err := st.Add(context.Background(), []envoyrl.Counter{{Key: key, TTL: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	return srv, c, st
}

// settledCount reads the counter key once a server thawed has applied what
// it was sent while frozen: when its value has stayed the same for 300 ms
// (within 10 s); -1 if it could not be read.
func settledCount(c *redis.Client, key string) int64 {
	last, stable := int64(-1), time.Now()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		n, err := c.Get(context.Background(), key).Int64()
		if err != nil {
			continue
		}
		if n != last {
			last, stable = n, time.Now()
		} else if time.Since(stable) > 300*time.Millisecond {
			break
		}
	}
	return last
}

// TestFrozenServerBoundsAddAndGet: on a frozen server (SIGSTOP) Add and Get
// return by their deadline, not by the client's read timeout.
func TestFrozenServerBoundsAddAndGet(t *testing.T) {
	key := uuid.NewString()
	srv, _, st := frozenStore(t, key)
	srv.Freeze(t)
	defer srv.Thaw(t)
	const d = 300 * time.Millisecond
	for name, call := range map[string]func(context.Context, []envoyrl.Counter) error{"Add": st.Add, "Get": st.Get} {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		began := time.Now()
		err := call(ctx, []envoyrl.Counter{{Key: key, Hits: 1, TTL: time.Hour}})
		took := time.Since(began)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || took > d+1200*time.Millisecond {
			t.Errorf("%s with a %v deadline on a frozen server: %v after %v", name, d, err, took)
		}
	}
}

// TestGivenUpAddsAreNotCounted: 200 Adds that give up (a 20-ms deadline)
// on a frozen server are not counted when it resumes, but for those the
// batches in flight had already written. The calls come one after another,
// so that is one per worker, and on a loaded machine (a worker's batch
// outlives its caller's deadline by a scheduling delay, and the next call
// goes to the other worker) up to two per worker: 3 have been seen.
func TestGivenUpAddsAreNotCounted(t *testing.T) {
	key := uuid.NewString()
	srv, c, st := frozenStore(t, key)
	srv.Freeze(t)
	for i := range 200 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := st.Add(ctx, []envoyrl.Counter{{Key: key, Hits: 1, TTL: time.Hour}})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call %d on a frozen server: %v", i, err)
		}
	}
	srv.Thaw(t)
	last := settledCount(c, key)
	if last > 4 {
		t.Fatalf("counter at %d after 200 Adds that gave up; want at most 4 (the batches in flight)", last)
	}
}

// TestFrozenServerBoundsAllowances: with LocalAllowance, on a frozen server,
// an Add that needs a take returns by its deadline, and Close by its own
// bound (2 s), with the take and the give-backs on the wire; neither waits
// for the client's read timeout (5 s each before 2026-12-06, with
// go-redis's default options), nor for ever on a client without one.
func TestFrozenServerBoundsAllowances(t *testing.T) {
	for name, opts := range map[string]redis.Options{
		"client defaults": {},
		"no read timeout": {ReadTimeout: -1},
	} {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			opts.Addr = srv.Addr()
			c := redis.NewClient(&opts)
			t.Cleanup(func() { c.Close() })
			st := redisstore.New(c, redisstore.Options{LocalAllowance: true})
			t.Cleanup(func() { st.Close() })
			frozenAllowances(t, srv, st)
		})
	}
}

func frozenAllowances(t *testing.T, srv *redistest.Server, st *redisstore.Store) {
	key := uuid.NewString()
	end := time.Now().Truncate(time.Hour).Add(time.Hour).Unix()
	counter := func(hits uint64) []envoyrl.Counter {
		return []envoyrl.Counter{{Key: key, Hits: hits, Limit: 1_000_000, End: end, TTL: time.Hour}}
	}
	for range 2000 { // hot: the store takes an allowance
		if err := st.Add(context.Background(), counter(1)); err != nil {
			t.Fatal(err)
		}
	}
	held := st.HeldForTest(key)
	if held == 0 {
		t.Fatalf("no allowance after 2000 hits: %+v", st.AllowanceStats())
	}
	srv.Freeze(t)
	defer srv.Thaw(t)
	const d = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	began := time.Now()
	err := st.Add(ctx, counter(held+10)) // more than held: a take
	took := time.Since(began)
	if !errors.Is(err, context.DeadlineExceeded) || took > d+1200*time.Millisecond {
		t.Errorf("an Add that needs a take, with a %v deadline on a frozen server: %v after %v", d, err, took)
	}
	began = time.Now()
	st.Close()
	took = time.Since(began)
	t.Logf("Close on a frozen server holding %d units: %v", held, took)
	if took > 2*time.Second+1200*time.Millisecond {
		t.Errorf("Close on a frozen server took %v, over its bound of 2s", took)
	}
	if st := st.AllowanceStats(); st.Returned != 0 {
		t.Errorf("%d units returned to a frozen server", st.Returned)
	}
}

// TestGivenUpTakeAppliedAfterThaw: a take given up on a frozen server (its
// Add's deadline ended) that the server runs once thawed is settled as a
// failed take: the units it lent are lost to the window, never admitted;
// what the store held before it is still spent. The window is then spent to
// its end: what the store admitted in all is the limit less exactly what the
// given-up take lent (the counter's growth while the store was frozen out).
func TestGivenUpTakeAppliedAfterThaw(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	st := redisstore.New(c, redisstore.Options{LocalAllowance: true})
	t.Cleanup(func() { st.Close() })
	key := uuid.NewString()
	const limit = 20_000
	end := time.Now().Truncate(time.Hour).Add(time.Hour).Unix()
	var admitted uint64
	add := func(ctx context.Context, hits uint64) error {
		cs := []envoyrl.Counter{{Key: key, Hits: hits, Limit: limit, End: end, TTL: time.Hour}}
		err := st.Add(ctx, cs)
		if err == nil && cs[0].Count <= limit {
			admitted += hits
		}
		return err
	}
	for range 2000 { // hot: the store takes an allowance
		if err := add(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
	}
	held := st.HeldForTest(key)
	if held == 0 {
		t.Fatalf("no allowance after 2000 hits: %+v", st.AllowanceStats())
	}
	before := st.AllowanceStats()
	atFreeze, err := c.Get(context.Background(), key).Uint64()
	if err != nil {
		t.Fatal(err)
	}
	srv.Freeze(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err = add(ctx, held+10) // more than held: a take, given up
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		srv.Thaw(t)
		t.Fatalf("an Add that needs a take on a frozen server: %v; want DeadlineExceeded", err)
	}
	srv.Thaw(t)
	last := settledCount(c, key)
	lentLate := uint64(last) - atFreeze
	if last < 0 || lentLate == 0 {
		t.Fatalf("the counter went from %d to %d over the freeze: the take was not run after the thaw", atFreeze, last)
	}
	// Spend the rest of the window: refused 200 times in a row is its end.
	for refused, i := 0, 0; refused < 200; i++ {
		if i > 4*limit {
			t.Fatalf("still admitting after %d hits: %d admitted of %d", i, admitted, limit)
		}
		n := admitted
		if err := add(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		if admitted == n {
			refused++
		} else {
			refused = 0
		}
	}
	after := st.AllowanceStats()
	counter, err := c.Get(context.Background(), key).Uint64()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("admitted %d of %d; held %d at the freeze; the given-up take lent %d; counter %d; stats before %+v, after %+v",
		admitted, limit, held, lentLate, counter, before, after)
	if admitted > limit {
		t.Fatalf("admitted %d, over the limit of %d", admitted, limit)
	}
	if counter < admitted {
		t.Errorf("the counter (%d) is below what was admitted (%d)", counter, admitted)
	}
	if lost := limit - admitted; lost != lentLate {
		t.Errorf("lost %d units; want exactly the %d the given-up take lent (%d were held before it)", lost, lentLate, held)
	}
}
