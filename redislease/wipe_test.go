package redislease_test

import (
	"context"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/redislease"
	"github.com/costwise/batcher/sharing"
	"go.uber.org/goleak"
)

// TestWipeNoOverUse runs three instances sharing 20,000 in 20 partitions on
// a redis-server of the test's own, kills it and starts it again empty
// while their leases are still valid: the instances never count more than
// the shared capacity between them (the hold keeps partitions nobody
// re-took free), and within 2 s of the server answering again at least
// 90 % of the capacity is leased again at the store.
func TestWipeNoOverUse(t *testing.T) {
	srv := redistest.StartServer(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	client := fastClient(srv.Addr())
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const shared, factor = 20000, 1000
	var ins []*sharing.Resource
	for i := 0; i < 3; i++ {
		r := redislease.NewSharedResource(client, "wipe", shared).WithFactor(factor).WithMaxInterval(200)
		mustNil(t, r.Provision(ctx))
		mustNil(t, r.Start(ctx))
		defer r.Stop()
		r.GiveMe(shared)
		ins = append(ins, r)
	}
	total := func() uint32 {
		var c uint32
		for _, r := range ins {
			c += r.Capacity()
		}
		return c
	}
	eventually(t, 15*time.Second, "every partition held", func() bool { return total() == shared })
	// Let the shares settle, so that each instance holds what it keeps.
	time.Sleep(2 * time.Second)

	srv.Kill()
	srv.Restart(t) // empty: no persistence
	answered := time.Now()
	var worst uint32
	back90 := time.Duration(-1)
	for time.Since(answered) < 8*time.Second {
		c := total()
		worst = max(worst, c)
		if c > shared {
			t.Fatalf("%v after the restart the instances count %d of %d", time.Since(answered), c, shared)
		}
		if back90 < 0 {
			keys, err := client.Keys(ctx, "{wipe}:lease:*").Result()
			if err == nil && len(keys) >= 18 {
				back90 = time.Since(answered)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if back90 < 0 || back90 > 2*time.Second {
		t.Fatalf("90 %% of the partitions leased again after %v, want within 2 s", back90)
	}
	t.Logf("Redis restarted empty: at most %d counted of %d (no over-use); 90 %% leased again %v after it answered",
		worst, shared, back90.Round(time.Millisecond))
}
