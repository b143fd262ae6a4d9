package redislease_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/lease"
	"github.com/costwise/batcher/redislease"
	"github.com/costwise/batcher/sharing"
	"github.com/redis/go-redis/v9"
)

// TestPromiseClusterSharing checks "so it works on a single server, behind
// Sentinel and on Redis Cluster" and "Resources with different prefixes hash
// to their own slots" on a three-master Redis Cluster the test starts: two
// resources per prefix, over a redis.ClusterClient, provision, split the
// shared capacity without ever counting more than it, raise no error event,
// keep every key of a prefix on one node, and, when one stops, the other
// gets everything back long before a lease could expire.
func TestPromiseClusterSharing(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const shared, factor, reserved = 10000, 1000, 1000
	var ev eventLog
	start := func(prefix string) *sharing.Resource {
		r := redislease.NewSharedResource(client, prefix, shared).
			WithFactor(factor).WithReservedCapacity(reserved).WithMaxInterval(50)
		r.AddListener(ev.listen)
		mustNil(t, r.Provision(ctx))
		mustNil(t, r.Start(ctx))
		t.Cleanup(r.Stop)
		r.GiveMe(r.MaxCapacity())
		return r
	}
	// Two prefixes whose hash tags fall on different masters (checked
	// below), so both kinds of routing are exercised.
	prefixes := []string{"orders-db", "cache-b"}
	for _, prefix := range prefixes {
		a := start(prefix)
		eventually(t, 10*time.Second, prefix+": a alone gets everything", func() bool {
			return a.Capacity() == shared+reserved
		})
		b := start(prefix)
		eventually(t, 15*time.Second, prefix+": a and b split evenly", func() bool {
			ca, cb := a.Capacity(), b.Capacity()
			if ca+cb > shared+2*reserved {
				t.Fatalf("%s: a counts %d and b %d, more than shared %d + 2 × reserved %d", prefix, ca, cb, shared, reserved)
			}
			return ca == shared/2+reserved && cb == shared/2+reserved
		})
		b.Stop()
		// Stop released b's leases and withdrew its demand: a takes them
		// well before the 15-s leases could have expired.
		stopped := time.Now()
		eventually(t, 5*time.Second, prefix+": a gets b's half after b stops", func() bool {
			return a.Capacity() == shared+reserved
		})
		if d := time.Since(stopped); d > 5*time.Second {
			t.Fatalf("%s: a took %v to get b's partitions", prefix, d)
		}
		snap, err := redislease.New(client, prefix).Snapshot(ctx, shared/factor)
		mustNil(t, err)
		if _, ok := snap.Demands[b.Owner()]; ok {
			t.Fatalf("%s: b's demand is still published after Stop: %v", prefix, snap.Demands)
		}
		leased := 0
		for _, s := range snap.Partitions {
			if s == lease.PartitionLeased {
				leased++
			}
		}
		if leased != shared/factor {
			t.Fatalf("%s: %d partitions leased at the store, want all %d (held by a)", prefix, leased, shared/factor)
		}
	}

	// Every key of one prefix lives on one master.
	var mu sync.Mutex
	nodesOf := map[string]map[string]bool{}
	err := client.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		for _, prefix := range prefixes {
			keys, err := node.Keys(ctx, "{"+prefix+"}:*").Result()
			if err != nil {
				return err
			}
			if len(keys) > 0 {
				mu.Lock()
				if nodesOf[prefix] == nil {
					nodesOf[prefix] = map[string]bool{}
				}
				nodesOf[prefix][node.Options().Addr] = true
				mu.Unlock()
			}
		}
		return nil
	})
	mustNil(t, err)
	for _, prefix := range prefixes {
		if n := len(nodesOf[prefix]); n != 1 {
			t.Errorf("keys of prefix %s on %d masters (%v), want exactly one", prefix, n, nodesOf[prefix])
		}
	}
	for node := range nodesOf[prefixes[0]] {
		if nodesOf[prefixes[1]][node] {
			t.Errorf("prefixes %v both on master %s; the test wants them on different masters", prefixes, node)
		}
	}
	if errs := ev.errorMessages(); len(errs) > 0 {
		t.Fatalf("%d error events on the cluster, first: %s", len(errs), strings.Join(errs[:1], ""))
	}
	if n := ev.count(sharing.CreatedBlobEvent); n != len(prefixes)*shared/factor {
		t.Errorf("%d created-blob events, want %d (one per partition per prefix)", n, len(prefixes)*shared/factor)
	}
}
