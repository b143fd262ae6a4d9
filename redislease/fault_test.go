package redislease_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/lease"
	"github.com/costwise/batcher/sharing"

	"github.com/costwise/batcher/redislease"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// eventLog records a SharedResource's events; it is safe for concurrent use.
type eventLog struct {
	mu     sync.Mutex
	counts map[string]int
	errors []string
}

func (l *eventLog) listen(event string, _ int, msg string, _ interface{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counts == nil {
		l.counts = map[string]int{}
	}
	l.counts[event]++
	if event == sharing.ErrorEvent {
		l.errors = append(l.errors, msg)
	}
}

func (l *eventLog) count(event string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[event]
}

// errorMessages returns the messages of the error events so far.
func (l *eventLog) errorMessages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.errors...)
}

// fastClient is a client that gives up quickly on a dead server, so the
// resource's loop sees errors at once instead of hanging on retries.
func fastClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:         addr,
		DialTimeout:  200 * time.Millisecond,
		ReadTimeout:  500 * time.Millisecond,
		WriteTimeout: 500 * time.Millisecond,
		MaxRetries:   -1,
	})
}

// TestServerRestartRecovery runs a SharedResource on a redis-server of its
// own, kills the server, and restarts it empty on the same port: the
// resource raises error events and falls back to its reserved capacity
// while the server is away, without panicking, then provisions again and
// wins its capacity back without a restart of the process.
func TestServerRestartRecovery(t *testing.T) {
	srv := redistest.StartServer(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	client := fastClient(srv.Addr())
	defer client.Close()

	const reserved, shared = 2, 10
	// A 4 s lease has a 1 s margin: each lease counts for 3 s after its
	// acquire or renew was sent, so losing the server costs at most 3 s.
	res := redislease.NewSharedResource(client, "fault", shared).
		WithReservedCapacity(reserved).
		WithLeaseDuration(4 * time.Second).
		WithMaxInterval(100)
	var log eventLog
	res.AddListener(log.listen)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mustNil(t, res.Provision(ctx))
	mustNil(t, res.Start(ctx))
	defer res.Stop()
	res.GiveMe(reserved + shared)
	eventually(t, 5*time.Second, "full capacity on the first server", func() bool {
		return res.Capacity() == reserved+shared
	})
	created := log.count(lease.CreatedContainerEvent)

	srv.Kill()
	watchFall(t, res, reserved, 6*time.Second)
	eventually(t, 5*time.Second, "an error event about the dead server", func() bool {
		return log.count(sharing.ErrorEvent) > 0
	})

	srv.Restart(t) // empty: no persistence
	eventually(t, 15*time.Second, "full capacity on the restarted server", func() bool {
		return res.Capacity() == reserved+shared
	})
	if log.count(lease.CreatedContainerEvent) <= created {
		t.Fatal("the resource won capacity back without provisioning the emptied store again")
	}
	keys, err := client.Keys(ctx, "{fault}:lease:*").Result()
	mustNil(t, err)
	if len(keys) != shared {
		t.Fatalf("%d lease keys on the restarted server, want %d", len(keys), shared)
	}

	res.Stop()
	if c := res.Capacity(); c != reserved {
		t.Fatalf("capacity after Stop = %d, want the reserved %d", c, reserved)
	}
	keys, err = client.Keys(ctx, "{fault}:lease:*").Result()
	mustNil(t, err)
	if len(keys) != 0 {
		t.Fatalf("lease keys %v left after Stop, want all released", keys)
	}
}

// watchFall checks, while the server is down, that capacity never rises
// (nothing can be renewed or acquired) and reaches the reserved capacity
// once the leases' validity windows have passed.
func watchFall(t *testing.T, res *sharing.Resource, reserved uint32, within time.Duration) {
	t.Helper()
	last := res.Capacity()
	deadline := time.Now().Add(within)
	for last != reserved {
		if time.Now().After(deadline) {
			t.Fatalf("capacity %d %v after the server died, want the reserved %d", last, within, reserved)
		}
		time.Sleep(10 * time.Millisecond)
		c := res.Capacity()
		if c > last {
			t.Fatalf("capacity rose from %d to %d while the server was down", last, c)
		}
		last = c
	}
}

// TestReplicaAcks runs a primary with one replica: with WithReplicaAcks a
// lease write succeeds once the replica has it, and when the replica is gone
// Acquire fails with a ReplicationError and leaves the partition free.
func TestReplicaAcks(t *testing.T) {
	// Without the default 5 s delay the replica syncs at once.
	primary := redistest.StartServer(t, "--repl-diskless-sync-delay", "0")
	replica := redistest.StartServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	replicaClient := fastClient(replica.Addr())
	defer replicaClient.Close()
	eventually(t, 10*time.Second, "the replica's link to the primary", func() bool {
		info, err := replicaClient.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	client := fastClient(primary.Addr())
	defer client.Close()
	// The replica reports its link up before the primary counts it online;
	// WAIT only counts replicas the primary has online.
	eventually(t, 10*time.Second, "the primary's view of its replica", func() bool {
		info, err := client.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	})
	ctx := ctxFor(t)
	m := redislease.New(client, "acks", redislease.WithReplicaAcks(1, time.Second))
	mustNil(t, m.Provision(ctx, 2, nil))
	mustNil(t, m.Acquire(ctx, 0, "a", time.Minute))
	mustNil(t, m.Renew(ctx, 0, "a", time.Minute))
	if owner := replicaClient.Get(ctx, "{acks}:lease:0").Val(); owner != "a" {
		t.Fatalf("the replica has lease owner %q right after an acknowledged acquire, want a", owner)
	}
	_, isConflict := errorsAsType[lease.ConflictError](m.Acquire(ctx, 0, "b", time.Minute))
	if !isConflict {
		t.Fatal("Acquire by b of a's acknowledged lease did not conflict")
	}

	replica.Kill()
	err := m.Acquire(ctx, 1, "a", time.Minute)
	repl, ok := errorsAsType[redislease.ReplicationError](err)
	if !ok || repl.Partition != 1 || repl.Wanted != 1 || repl.Acked != 0 {
		t.Fatalf("Acquire without a replica: %v, want ReplicationError{1, 1, 0}", err)
	}
	snap, err := m.Snapshot(ctx, 2)
	mustNil(t, err)
	if snap.Partitions[1] != lease.PartitionFree {
		t.Fatal("the unacknowledged lease was not released")
	}
	if _, ok := errorsAsType[redislease.ReplicationError](m.Renew(ctx, 0, "a", time.Minute)); !ok {
		t.Fatal("Renew without a replica did not fail with a ReplicationError")
	}
}

// TestReplicaAcksNeedsANodeClient checks the explicit error for clients
// whose commands cannot be pinned to one connection of the primary.
func TestReplicaAcksNeedsANodeClient(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}) // never dialled
	defer ring.Close()
	m := redislease.New(ring, "unused", redislease.WithReplicaAcks(1, time.Millisecond))
	err := m.Acquire(ctxFor(t), 0, "a", time.Second)
	if err == nil || !strings.Contains(err.Error(), "WithReplicaAcks needs") {
		t.Fatalf("Acquire through a Ring with WithReplicaAcks: %v, want an error naming the limit", err)
	}
}
