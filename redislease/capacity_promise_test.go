package redislease_test

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/costwise/batcher/redislease"
	"github.com/costwise/batcher/sharing"
)

// TestPromiseRedisSharedCapacity checks on Redis, through
// redislease.NewSharedResource, what docs/batcher.md promises of the shared
// capacity and its partitions: "the last partition is worth only the
// remainder: Capacity ≤ shared + reserved" ("shared 1,001 / factor 1,000
// alone: 1,001"), and "SetSharedCapacity(c) ... change them at run time (new
// partitions are provisioned)", with the errors Provision gives ("shared
// capacity 0 → UndefinedSharedCapacityError; more than 500 partitions →
// PartitionsOutOfRangeError"), which leave the capacity as it was. The
// existing tests check these on the in-process store only.
func TestPromiseRedisSharedCapacity(t *testing.T) {
	c := sharedClient(t)
	prefix := testPrefix(t, c)
	ctx := ctxFor(t)
	const factor, reserved = 1000, 7
	res := redislease.NewSharedResource(c, prefix, 1001).WithFactor(factor).WithReservedCapacity(reserved).WithMaxInterval(20)
	mustNil(t, res.Provision(ctx))
	mustNil(t, res.Start(ctx))
	defer res.Stop()
	res.GiveMe(1 << 30) // everything there is

	for _, step := range []struct {
		shared     uint32
		partitions int
	}{
		{1001, 2}, // 1,000 + 1
		{3500, 4}, // grown at run time: 1,000 × 3 + 500
		{1500, 2}, // shrunk: 1,000 + 500
		{500, 1},  // less than one factor
	} {
		if step.shared != 1001 {
			mustNil(t, res.SetSharedCapacity(step.shared))
		}
		want := step.shared + reserved
		eventually(t, 5*time.Second, "capacity "+strconv.Itoa(int(want)), func() bool {
			return res.Capacity() == want && res.Stats().Held == step.partitions
		})
		if got := res.MaxCapacity(); got != want {
			t.Fatalf("shared %d: MaxCapacity() = %d, want shared + reserved = %d", step.shared, got, want)
		}
		// The partitions exist in Redis, and no lease is held past them:
		// a partition past them stops counting at once, and its lease is
		// released in Redis by a call that may still be in flight.
		var why string
		leasesRight := func() bool {
			for p := 0; p < step.partitions+2; p++ {
				owner, err := c.Get(ctx, "{"+prefix+"}:lease:"+strconv.Itoa(p)).Result()
				held := err == nil && owner == res.Owner()
				if p < step.partitions && !held {
					why = fmt.Sprintf("shared %d: partition %d not leased by this instance in Redis (%q, %v)", step.shared, p, owner, err)
					return false
				}
				if p >= step.partitions && held {
					why = fmt.Sprintf("shared %d: partition %d, past the %d partitions, still leased in Redis", step.shared, p, step.partitions)
					return false
				}
			}
			return true
		}
		for deadline := time.Now().Add(5 * time.Second); !leasesRight(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal(why + " (5 s on)")
			}
		}
	}

	if err := res.SetSharedCapacity(0); !errors.As(err, new(sharing.UndefinedSharedCapacityError)) {
		t.Fatalf("SetSharedCapacity(0): %v, want UndefinedSharedCapacityError", err)
	}
	var out sharing.PartitionsOutOfRangeError
	if err := res.SetSharedCapacity(500*factor + 1); !errors.As(err, &out) || out.PartitionCount != 501 {
		t.Fatalf("SetSharedCapacity(500,001): %v, want PartitionsOutOfRangeError for 501 partitions", err)
	}
	mustNil(t, res.SetSharedCapacity(500*factor)) // exactly 500 partitions: allowed
	mustNil(t, res.SetSharedCapacity(500))
	if got := res.MaxCapacity(); got != 500+reserved {
		t.Fatalf("after refused SetSharedCapacity calls: MaxCapacity() = %d, want %d", got, 500+reserved)
	}
	eventually(t, 5*time.Second, "capacity 507 kept", func() bool { return res.Capacity() == 500+reserved })
}

// TestPromiseReadmeOneLiner runs README's shared resource on Redis as it is
// written, with the options a user gets: 20,000 in 20 partitions of 1,000,
// all held by a lone instance. (Without the factor the same line needs
// 20,000 partitions and Provision refuses it: the README once showed it so.)
func TestPromiseReadmeOneLiner(t *testing.T) {
	c := sharedClient(t)
	prefix := testPrefix(t, c)
	ctx := ctxFor(t)
	res := redislease.NewSharedResource(c, prefix, 20000).WithFactor(1000)
	mustNil(t, res.Provision(ctx))
	mustNil(t, res.Start(ctx))
	defer res.Stop()
	res.GiveMe(20000)
	eventually(t, 10*time.Second, "capacity 20000 in 20 partitions", func() bool {
		return res.Capacity() == 20000 && res.Stats().Held == 20
	})
	var tooMany sharing.PartitionsOutOfRangeError
	if err := redislease.NewSharedResource(c, prefix+"-bare", 20000).Provision(ctx); !errors.As(err, &tooMany) {
		t.Fatalf("factor 1: Provision = %v, want PartitionsOutOfRangeError", err)
	}
}
