package redislease_test

import (
	"testing"
	"time"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/redislease"
	"github.com/costwise/batcher/sharing"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// TestStopWithFrozenServer freezes the redis-server under a running
// resource with SIGSTOP, as a hung store: Stop returns within
// sharing.StopTimeout however long the client takes to give up, Capacity is
// the reserved capacity at once, and the goroutine that goes on releasing
// in the background ends by the client's own timeouts (checked the way
// goleak does, with more patience).
func TestStopWithFrozenServer(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func(addr string) *redis.Options
	}{
		{"client timeouts 500ms", func(addr string) *redis.Options {
			return &redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, ReadTimeout: 500 * time.Millisecond,
				WriteTimeout: 500 * time.Millisecond, MaxRetries: -1}
		}},
		{"client defaults", func(addr string) *redis.Options { return &redis.Options{Addr: addr} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			ignore := goleak.IgnoreCurrent()
			client := redis.NewClient(tc.opts(srv.Addr()))
			res := redislease.NewSharedResource(client, "frozen", 8).WithReservedCapacity(1).
				WithLeaseDuration(3 * time.Second).WithMaxInterval(50)
			ctx := ctxFor(t)
			mustNil(t, res.Provision(ctx))
			mustNil(t, res.Start(ctx))
			res.GiveMe(9)
			eventually(t, 5*time.Second, "full capacity", func() bool { return res.Capacity() == 9 })

			srv.Freeze(t)
			defer srv.Thaw(t)
			start := time.Now()
			res.Stop()
			took := time.Since(start)
			if took > sharing.StopTimeout+500*time.Millisecond {
				t.Fatalf("Stop took %v against a frozen server, want at most %v", took, sharing.StopTimeout)
			}
			if c := res.Capacity(); c != 1 {
				t.Fatalf("Capacity() after Stop = %d, want the reserved 1", c)
			}
			ended := time.Now()
			deadline := ended.Add(30 * time.Second)
			for goleak.Find(ignore) != nil {
				if time.Now().After(deadline) {
					t.Fatalf("the background release still runs 30 s after Stop: %v", goleak.Find(ignore))
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("Stop returned in %v; the background release ended %v later, by the client's timeouts",
				took.Round(time.Millisecond), time.Since(ended).Round(time.Millisecond))
			client.Close()
		})
	}
}
