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
	// Read until the count has stayed the same for 300 ms: the server has
	// applied what it was sent while frozen.
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
	if last > 4 {
		t.Fatalf("counter at %d after 200 Adds that gave up; want at most 4 (the batches in flight)", last)
	}
}
