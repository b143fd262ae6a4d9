package redislease_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/lease"
	"github.com/costwise/batcher/redislease"
	"github.com/costwise/batcher/sharing"
	"github.com/redis/go-redis/v9"
)

// TestPromiseSentinelSharing checks "so it works on a single server, behind
// Sentinel and on Redis Cluster" for Sentinel: two resources on a
// redis.NewFailoverClient split the shared capacity of a master that a real
// Sentinel watches; the master is killed, the Sentinel promotes its
// replica, and the two go on sharing on the new master, back to an even
// split, without ever counting more than the capacity between them.
func TestPromiseSentinelSharing(t *testing.T) {
	master := redistest.StartServer(t)
	replica := redistest.StartServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	const name = "leases"
	sentinel := redistest.StartSentinel(t, master, name,
		"sentinel down-after-milliseconds "+name+" 500", "sentinel failover-timeout "+name+" 2000")
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel, MaxRetries: -1})
	t.Cleanup(func() { sc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The Sentinel must know the replica, linked and in sync, before the
	// master dies, or it has nothing to promote.
	eventually(t, 20*time.Second, "the Sentinel sees the replica linked to the master", func() bool {
		rs, err := sc.Replicas(ctx, name).Result()
		if err != nil || len(rs) != 1 {
			return false
		}
		return rs[0]["port"] == strconv.Itoa(replica.Port) && rs[0]["master-link-status"] == "ok"
	})

	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: name, SentinelAddrs: []string{sentinel},
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
	})
	t.Cleanup(func() { client.Close() }) // after the resources stop (cleanups run last first)

	const prefix, shared, factor, reserved = "orders-db", 10000, 1000, 1000
	// Leases of 4 s count for 2 s after their request: a resource that
	// could not renew on the new master falls back to its reserve well
	// within the test.
	const leaseFor = 4 * time.Second
	start := func() *sharing.Resource {
		r := redislease.NewSharedResource(client, prefix, shared).WithLeaseDuration(leaseFor).
			WithFactor(factor).WithReservedCapacity(reserved).WithMaxInterval(50)
		mustNil(t, r.Provision(ctx))
		mustNil(t, r.Start(ctx))
		t.Cleanup(r.Stop)
		r.GiveMe(r.MaxCapacity())
		return r
	}
	a, b := start(), start()

	// From here to the end, a watcher checks that the two never count more
	// than the shared capacity and their reserves, failover included.
	var over atomic.Value
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
			if ca, cb := a.Capacity(), b.Capacity(); ca+cb > shared+2*reserved && over.Load() == nil {
				over.Store("a counts " + strconv.Itoa(int(ca)) + " and b " + strconv.Itoa(int(cb)))
			}
		}
	}()
	defer func() { close(done); wg.Wait() }()
	even := func() bool {
		return a.Capacity() == shared/2+reserved && b.Capacity() == shared/2+reserved
	}
	eventually(t, 15*time.Second, "a and b split evenly on the first master", even)

	master.Kill()
	killed := time.Now()
	eventually(t, 30*time.Second, "the Sentinel promotes the replica", func() bool {
		addr, err := sc.GetMasterAddrByName(ctx, name).Result()
		return err == nil && len(addr) == 2 && addr[1] == strconv.Itoa(replica.Port)
	})
	// The leases were copied to the replica, with their expiry times: each
	// resource renews its own there, and the split holds, or comes back,
	// past the time a lease from before the kill could still count.
	eventually(t, 30*time.Second, "a and b split evenly on the promoted replica, 2 leases after the kill", func() bool {
		return time.Since(killed) > 2*leaseFor && even()
	})
	if v := over.Load(); v != nil {
		t.Fatalf("more than shared %d + 2 × reserved %d counted: %s", shared, reserved, v)
	}
	keys, err := replica.Client(t).Keys(ctx, "{"+prefix+"}:*").Result()
	mustNil(t, err)
	if len(keys) == 0 {
		t.Fatal("no key of the prefix on the promoted replica")
	}
	// A snapshot through the failover client reads the new master's leases:
	// every partition leased.
	snap, err := redislease.New(client, prefix).Snapshot(ctx, shared/factor)
	mustNil(t, err)
	leased := 0
	for _, s := range snap.Partitions {
		if s == lease.PartitionLeased {
			leased++
		}
	}
	if leased != shared/factor {
		t.Fatalf("%d partitions leased on the new master, want %d", leased, shared/factor)
	}
}
