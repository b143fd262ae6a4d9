package redislease_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/costwise/batcher/redislease"
)

// TestPromiseRedisDefaultLeaseAndStopAtOnce checks on a healthy Redis, with
// the defaults of redislease.NewSharedResource, the table's
// "WithLeaseDuration(d) | 15 s" at the store (the lease keys carry a PX
// expiry of 15 s, set by the server), the published demand record, and
// "Stop() releases every lease at once, so another instance can take the
// partitions immediately, and leaves Capacity() at the reserved capacity":
// as soon as Stop returns, no lease key and no demand record of the
// instance is left, and another owner acquires every partition.
func TestPromiseRedisDefaultLeaseAndStopAtOnce(t *testing.T) {
	c := sharedClient(t)
	prefix := testPrefix(t, c)
	ctx := ctxFor(t)
	const shared, reserved = 4, 2
	res := redislease.NewSharedResource(c, prefix, shared).WithReservedCapacity(reserved)
	mustNil(t, res.Provision(ctx))
	mustNil(t, res.Start(ctx))
	defer res.Stop()
	res.GiveMe(shared + reserved)
	eventually(t, 5*time.Second, "full capacity", func() bool { return res.Capacity() == shared+reserved })

	leaseKey := func(i int) string { return "{" + prefix + "}:lease:" + strconv.Itoa(i) }
	demandKey := "{" + prefix + "}:demand"
	for i := 0; i < shared; i++ {
		if owner := c.Get(ctx, leaseKey(i)).Val(); owner != res.Owner() {
			t.Fatalf("partition %d held by %q, want %q", i, owner, res.Owner())
		}
		// Just acquired (or renewed): close to the default 15 s, never above.
		ttl := c.PTTL(ctx, leaseKey(i)).Val()
		if ttl > 15*time.Second || ttl < 13*time.Second {
			t.Fatalf("partition %d: lease ttl %v at the server, want the default 15 s (just taken)", i, ttl)
		}
	}
	if !c.HExists(ctx, demandKey, res.Owner()).Val() {
		t.Fatalf("no demand record for %s in %s", res.Owner(), demandKey)
	}

	res.Stop()
	if got := res.Capacity(); got != reserved {
		t.Fatalf("Capacity() after Stop = %d, want the reserved %d", got, reserved)
	}
	for i := 0; i < shared; i++ {
		if n := c.Exists(ctx, leaseKey(i)).Val(); n != 0 {
			t.Fatalf("partition %d: lease key still there right after Stop returned (owner %q, ttl %v)",
				i, c.Get(ctx, leaseKey(i)).Val(), c.PTTL(ctx, leaseKey(i)).Val())
		}
	}
	if c.HExists(ctx, demandKey, res.Owner()).Val() {
		t.Fatal("the demand record is still published right after Stop returned")
	}
	other := redislease.New(c, prefix)
	for i := 0; i < shared; i++ {
		if err := other.Acquire(ctx, i, "another-instance", time.Minute); err != nil {
			t.Fatalf("another instance cannot take partition %d right after Stop: %v", i, err)
		}
	}
}
