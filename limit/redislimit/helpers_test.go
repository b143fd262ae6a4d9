package redislimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/redistest"
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
