package redislease_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/lease"

	"github.com/costwise/batcher/leasetest"
	"github.com/costwise/batcher/redislease"
	"github.com/redis/go-redis/v9"
)

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestConformance runs the shared LeaseManager suite. Redis accepts short
// leases, so the expiry subtests wait a couple of seconds, not Azure's 17;
// the slack leaves room for a loaded machine under -race.
func TestConformance(t *testing.T) {
	c := sharedClient(t)
	leasetest.RunWithOptions(t, func(t *testing.T) lease.Manager {
		return redislease.New(c, testPrefix(t, c))
	}, leasetest.Options{
		LeaseDuration:       10 * time.Second,
		ExpiryLeaseDuration: 2 * time.Second,
		DemandTTL:           time.Second,
		Slack:               400 * time.Millisecond,
	})
}

// TestKeysShareOneHashTag checks that every key the manager writes starts
// with the hash tag {prefix}, which is what pins them to one cluster slot.
func TestKeysShareOneHashTag(t *testing.T) {
	c := sharedClient(t)
	prefix := testPrefix(t, c)
	m := redislease.New(c, prefix)
	ctx := ctxFor(t)
	mustNil(t, m.Provision(ctx, 3, nil))
	mustNil(t, m.Acquire(ctx, 2, "a", time.Minute))
	mustNil(t, m.PublishDemand(ctx, "a", 3, time.Minute))
	keys, err := c.Keys(ctx, "*"+prefix+"*").Result()
	mustNil(t, err)
	if len(keys) != 3 {
		t.Fatalf("keys %v, want the partition set, the demand hash and one lease", keys)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "{"+prefix+"}:") {
			t.Errorf("key %q does not start with the hash tag {%s}", k, prefix)
		}
	}
}

// TestProvisionNamesTheResource checks the container events' message and
// that an empty prefix falls back to the default, never to an empty tag.
func TestProvisionNamesTheResource(t *testing.T) {
	c := sharedClient(t)
	prefix := testPrefix(t, c)
	var msgs []string
	report := func(event string, _ int, msg string) {
		if event == lease.CreatedContainerEvent || event == lease.VerifiedContainerEvent {
			msgs = append(msgs, event+" "+msg)
		}
	}
	m := redislease.New(c, prefix)
	mustNil(t, m.Provision(ctxFor(t), 1, report))
	mustNil(t, m.Provision(ctxFor(t), 1, report))
	url := "redis://" + redistest.Addr() + "/{" + prefix + "}"
	want := []string{lease.CreatedContainerEvent + " " + url, lease.VerifiedContainerEvent + " " + url}
	if strings.Join(msgs, "|") != strings.Join(want, "|") {
		t.Fatalf("container events %q, want %q", msgs, want)
	}
	if got := redislease.New(c, "", redislease.WithAddress("cache:6379")).URL(); got != "redis://cache:6379/{batcher}" {
		t.Fatalf("URL with an empty prefix = %q", got)
	}
}

// TestOwnerChecksLeaveTheLeaseAlone checks at the key level that a renew or
// release by a non-owner neither extends nor deletes the owner's lease.
func TestOwnerChecksLeaveTheLeaseAlone(t *testing.T) {
	c := sharedClient(t)
	prefix := testPrefix(t, c)
	m := redislease.New(c, prefix)
	ctx := ctxFor(t)
	key := "{" + prefix + "}:lease:0"
	mustNil(t, m.Provision(ctx, 1, nil))
	mustNil(t, m.Acquire(ctx, 0, "a", 5*time.Second))

	_, isConflict := errorsAsType[lease.ConflictError](m.Renew(ctx, 0, "b", time.Hour))
	if !isConflict {
		t.Fatal("Renew by b of a's lease did not fail with a LeaseConflictError")
	}
	if ttl := c.PTTL(ctx, key).Val(); ttl <= 0 || ttl > 5*time.Second {
		t.Fatalf("after b's renew the lease has ttl %v, want a's 5 s or less", ttl)
	}
	_, isConflict = errorsAsType[lease.ConflictError](m.Release(ctx, 0, "b"))
	if !isConflict {
		t.Fatal("Release by b of a's lease did not fail with a LeaseConflictError")
	}
	if owner := c.Get(ctx, key).Val(); owner != "a" {
		t.Fatalf("after b's release the lease belongs to %q, want a", owner)
	}
	mustNil(t, m.Renew(ctx, 0, "a", time.Minute))
	if ttl := c.PTTL(ctx, key).Val(); ttl <= 5*time.Second {
		t.Fatalf("a's renew left ttl %v, want close to a minute", ttl)
	}
	mustNil(t, m.Release(ctx, 0, "a"))
	if n := c.Exists(ctx, key).Val(); n != 0 {
		t.Fatal("a's release left the lease key behind")
	}
}

// TestLeaseTTLIsSetByTheServer checks that the lease is a key the server
// expires after the duration asked for, rounded up to a whole millisecond.
func TestLeaseTTLIsSetByTheServer(t *testing.T) {
	c := sharedClient(t)
	prefix := testPrefix(t, c)
	m := redislease.New(c, prefix)
	ctx := ctxFor(t)
	mustNil(t, m.Provision(ctx, 2, nil))
	mustNil(t, m.Acquire(ctx, 0, "a", 2*time.Second+500*time.Microsecond))
	ttl := c.PTTL(ctx, "{"+prefix+"}:lease:0").Val()
	if ttl > 2001*time.Millisecond || ttl < 1500*time.Millisecond {
		t.Fatalf("PTTL %v after a 2.0005 s lease, want 2.001 s or a little less", ttl)
	}
	mustNil(t, m.Acquire(ctx, 1, "a", 50*time.Millisecond))
	eventually(t, 2*time.Second, "the 50 ms lease expires on the server", func() bool {
		snap, err := m.Snapshot(ctx, 2)
		return err == nil && snap.Partitions[1] == lease.PartitionFree
	})
	snap, err := m.Snapshot(ctx, 2)
	mustNil(t, err)
	if snap.Partitions[0] != lease.PartitionLeased {
		t.Fatal("the 2 s lease ended together with the 50 ms one")
	}
}

// TestDemandExpiryUsesServerTime checks that the expiry written with a
// demand comes from the server's TIME, and that Snapshot judges and prunes
// records by the server's clock alone: records planted with an expiry in the
// server's past vanish, those in its future stay, whatever the test
// process's clock says.
func TestDemandExpiryUsesServerTime(t *testing.T) {
	c := sharedClient(t)
	prefix := testPrefix(t, c)
	m := redislease.New(c, prefix)
	ctx := ctxFor(t)
	demand := "{" + prefix + "}:demand"

	before := serverMillis(t, c)
	mustNil(t, m.PublishDemand(ctx, "a", 2, 90*time.Second))
	after := serverMillis(t, c)
	value := c.HGet(ctx, demand, "a").Val()
	parts := strings.Split(value, ":")
	exp, err := strconv.ParseInt(parts[len(parts)-1], 10, 64)
	if len(parts) != 2 || parts[0] != "2" || err != nil {
		t.Fatalf("demand record %q, want 2:<expiresAtMillis>", value)
	}
	if exp < before+90_000 || exp > after+90_000 {
		t.Fatalf("demand expires at %d, want server time + 90 s in [%d, %d]", exp, before+90_000, after+90_000)
	}
	if ttl := c.PTTL(ctx, demand).Val(); ttl <= 0 || ttl > 90*time.Second {
		t.Fatalf("demand hash ttl %v, want at most the 90 s of its longest record", ttl)
	}

	now := serverMillis(t, c)
	c.HSet(ctx, demand, "stale", "3:"+strconv.FormatInt(now-1, 10),
		"fresh", "4:"+strconv.FormatInt(now+60_000, 10), "garbage", "x")
	snap, err := m.Snapshot(ctx, 0)
	mustNil(t, err)
	if len(snap.Demands) != 2 || snap.Demands["a"] != 2 || snap.Demands["fresh"] != 4 {
		t.Fatalf("demands %v, want a:2 and fresh:4", snap.Demands)
	}
	fields := c.HKeys(ctx, demand).Val()
	if len(fields) != 2 {
		t.Fatalf("demand hash fields %v after Snapshot, want the lapsed and malformed ones pruned", fields)
	}
}

// TestEmptiedStoreReportsMissing imitates a server that came back empty:
// every call reports the partitions missing until Provision recreates them.
func TestEmptiedStoreReportsMissing(t *testing.T) {
	c := sharedClient(t)
	prefix := testPrefix(t, c)
	m := redislease.New(c, prefix)
	ctx := ctxFor(t)
	mustNil(t, m.Provision(ctx, 2, nil))
	mustNil(t, m.Acquire(ctx, 0, "a", time.Minute))
	deleteKeys(c, prefix)

	snap, err := m.Snapshot(ctx, 2)
	mustNil(t, err)
	if snap.Partitions[0] != lease.PartitionMissing || snap.Partitions[1] != lease.PartitionMissing {
		t.Fatalf("partitions %v after the store was emptied, want both missing", snap.Partitions)
	}
	for name, err := range map[string]error{
		"Acquire": m.Acquire(ctx, 1, "a", time.Minute),
		"Renew":   m.Renew(ctx, 1, "a", time.Minute),
		"Release": m.Release(ctx, 1, "a"),
	} {
		if missing, ok := errorsAsType[lease.PartitionMissingError](err); !ok || missing.Partition != 1 {
			t.Errorf("%s on an emptied store: %v, want PartitionMissingError for partition 1", name, err)
		}
	}
	var created []string
	mustNil(t, m.Provision(ctx, 2, func(event string, val int, _ string) {
		created = append(created, event+strconv.Itoa(val))
	}))
	want := lease.CreatedContainerEvent + "0 " + lease.CreatedBlobEvent + "0 " + lease.CreatedBlobEvent + "1"
	if strings.Join(created, " ") != want {
		t.Fatalf("re-provisioning reported %v, want %s", created, want)
	}
	mustNil(t, m.Acquire(ctx, 0, "b", time.Minute))
}

// TestRestartHold checks WithRestartHold: partitions created in an empty
// store are blocked for the hold, partitions added to a live store are not,
// and a store that lost its keys is held again.
func TestRestartHold(t *testing.T) {
	c := sharedClient(t)
	prefix := testPrefix(t, c)
	m := redislease.New(c, prefix, redislease.WithRestartHold(300*time.Millisecond))
	ctx := ctxFor(t)
	wantHeld := func(what string) {
		t.Helper()
		mustNil(t, m.Provision(ctx, 2, nil))
		snap, err := m.Snapshot(ctx, 2)
		mustNil(t, err)
		if snap.Partitions[0] != lease.PartitionLeased || snap.Partitions[1] != lease.PartitionLeased {
			t.Fatalf("%s: partitions %v, want both held", what, snap.Partitions)
		}
		if _, ok := errorsAsType[lease.ConflictError](m.Acquire(ctx, 0, "a", time.Minute)); !ok {
			t.Fatalf("%s: Acquire of a held partition did not conflict", what)
		}
		eventually(t, 3*time.Second, what+": the hold ends", func() bool {
			return m.Acquire(ctx, 0, "a", time.Minute) == nil
		})
	}
	wantHeld("first provisioning")
	mustNil(t, m.Provision(ctx, 3, nil))
	snap, err := m.Snapshot(ctx, 3)
	mustNil(t, err)
	if snap.Partitions[2] != lease.PartitionFree {
		t.Fatalf("partition 2 added to a live store is %v, want free", snap.Partitions[2])
	}
	deleteKeys(c, prefix)
	wantHeld("after the store lost its keys")
}

// TestRejectsOutOfRangeCounts checks the argument checks that protect the
// scripts from absurd key lists.
func TestRejectsOutOfRangeCounts(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	m := redislease.New(c, "unused")
	ctx := context.Background()
	if err := m.Provision(ctx, 0, nil); err == nil {
		t.Error("Provision(0) succeeded")
	}
	if err := m.Provision(ctx, lease.MaxPartitions+1, nil); err == nil {
		t.Error("Provision past MaxPartitions succeeded")
	}
	if _, err := m.Snapshot(ctx, lease.MaxPartitions+1); err == nil {
		t.Error("Snapshot past MaxPartitions succeeded")
	}
}

func mustNil(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
