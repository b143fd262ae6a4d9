package redislimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/redislimit"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// connect returns a client of the shared test server (see redistest.Addr),
// closed at cleanup, with a pool large enough for the conformance suite's
// 64 goroutines. A server that does not answer ends the test as
// redistest.Shared does.
func connect(t testing.TB) *redis.Client {
	t.Helper()
	redistest.Shared(t)
	c := redis.NewClient(&redis.Options{Addr: redistest.Addr(), DialTimeout: time.Second, PoolSize: 80})
	t.Cleanup(func() { c.Close() })
	return c
}

// testPrefix returns a key prefix of its own and deletes its keys at cleanup.
func testPrefix(t testing.TB, c redis.UniversalClient) string {
	t.Helper()
	prefix := "limittest-" + uuid.NewString()[:8] + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		del := func(ctx context.Context, c *redis.Client) error {
			iter := c.Scan(ctx, 0, prefix+"*", 200).Iterator()
			for iter.Next(ctx) {
				c.Del(ctx, iter.Val())
			}
			return iter.Err()
		}
		if cc, ok := c.(*redis.ClusterClient); ok {
			_ = cc.ForEachMaster(ctx, del)
		} else if sc, ok := c.(*redis.Client); ok {
			_ = del(ctx, sc)
		}
	})
	return prefix
}

// admitAsync makes n decisions of cost 1 on key at s from a goroutine, each
// of which must be allowed, and sends the first failure, or nil.
func admitAsync(ctx context.Context, s *redislimit.Store, key string, p limit.Policy, n int) <-chan error {
	done := make(chan error, 1)
	go func() {
		for i := range n {
			d, err := s.AllowN(ctx, key, p, 1)
			if err == nil && !d.Allowed {
				err = fmt.Errorf("decision %d refused: %+v", i, d)
			}
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	return done
}

// answeredUnlocked waits up to 10 s for done, decisions made while a lock
// that unlock lets go is held: on an error, or none in time (they waited
// for the lock), it lets the lock go and fails t, saying what waited.
func answeredUnlocked(t *testing.T, done <-chan error, unlock func(), what string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			unlock()
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		unlock()
		<-done
		t.Fatal(what + " waited for the shard's lock")
	}
}
