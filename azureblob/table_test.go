package azureblob_test

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/costwise/batcher/azureblob"
	"github.com/costwise/batcher/lease"
	"github.com/costwise/batcher/leasetest"
	"github.com/google/uuid"
)

// newAzuriteTable returns a lease table manager over a container of its
// own in the Azurite at serviceURL.
func newAzuriteTable(t *testing.T, serviceURL, container string) *azureblob.TableLeaseManager {
	m := azureblob.NewTableLeaseManager(azuriteAccount, container).
		WithServiceURL(serviceURL).
		WithMasterKey(azuriteKey)
	t.Cleanup(m.CloseIdleConnections)
	return m
}

// TestTableLeaseConformance runs the LeaseManager suite against the lease
// table on Azurite, each subtest in a fresh container. The table's leases
// may outlast their duration by up to about two seconds (the service's
// clock is known to a second), hence the slack.
func TestTableLeaseConformance(t *testing.T) {
	t.Parallel()
	serviceURL := azuriteURL(t)
	leasetest.RunWithOptions(t, func(t *testing.T) lease.Manager {
		return newAzuriteTable(t, serviceURL, uniqueContainer())
	}, leasetest.Options{SkipExpiry: testing.Short(), Slack: 3 * time.Second})
}

// TestTableManyWritersOneTable has 16 managers, as 16 processes would, race
// for 40 partitions in one table, each taking what it can in batches of 5:
// every partition ends up with exactly one holder, each holder's view
// agrees with the log, and no change was lost.
func TestTableManyWritersOneTable(t *testing.T) {
	t.Parallel()
	serviceURL := azuriteURL(t)
	name := uniqueContainer()
	const writers, partitions = 16, 40
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := newAzuriteTable(t, serviceURL, name).Provision(ctx, partitions, nil); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	owners := make([]string, writers)
	won := make([][]int, writers)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		owners[w] = uuid.NewString()
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			m := newAzuriteTable(t, serviceURL, name)
			for start := 0; start < partitions; start += 5 {
				batch := []int{}
				for p := start; p < start+5; p++ {
					batch = append(batch, (p+w*5)%partitions)
				}
				res, err := m.AcquireBatch(ctx, batch, owners[w], 15*time.Second)
				if err != nil {
					errs <- err
					return
				}
				for i, r := range res {
					var conflict lease.ConflictError
					switch {
					case r == nil:
						won[w] = append(won[w], batch[i])
					case !errors.As(r, &conflict):
						errs <- r
						return
					}
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("AcquireBatch: %v", err)
	}
	holder := map[int]int{}
	for w, ps := range won {
		for _, p := range ps {
			if h, ok := holder[p]; ok {
				t.Fatalf("partition %d acquired by both writer %d and writer %d", p, h, w)
			}
			holder[p] = w
		}
	}
	if len(holder) != partitions {
		t.Fatalf("%d of %d partitions acquired; every one was free", len(holder), partitions)
	}
	// Each holder can renew what it won and nothing else.
	check := newAzuriteTable(t, serviceURL, name)
	for p, w := range holder {
		if err := check.Renew(ctx, p, owners[w], 15*time.Second); err != nil {
			t.Fatalf("Renew(%d) by its holder %d: %v", p, w, err)
		}
		if err := check.Renew(ctx, p, owners[(w+1)%writers], 15*time.Second); err == nil {
			t.Fatalf("Renew(%d) by writer %d, which does not hold it, succeeded", p, (w+1)%writers)
		}
	}
}

// TestTableCountsRequests checks that Requests counts the HTTP requests a
// call makes: an append and a read of the log through it for an
// acquisition, one append for a renewal the table read last decides and
// for a demand.
func TestTableCountsRequests(t *testing.T) {
	t.Parallel()
	serviceURL := azuriteURL(t)
	m := newAzuriteTable(t, serviceURL, uniqueContainer())
	ctx := context.Background()
	if err := m.Provision(ctx, 4, nil); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	owner := uuid.NewString()
	before, failedBefore := m.Requests()
	if err := m.Acquire(ctx, 0, owner, 15*time.Second); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if _, err := m.RenewBatch(ctx, []int{0}, owner, 15*time.Second); err != nil {
		t.Fatalf("RenewBatch: %v", err)
	}
	if err := m.PublishDemand(ctx, owner, 4, 15*time.Second); err != nil {
		t.Fatalf("PublishDemand: %v", err)
	}
	after, failed := m.Requests()
	if got := after - before; got != 4 {
		t.Fatalf("Acquire, RenewBatch and PublishDemand right after Provision sent %d requests, want 4 (an append and a read for the acquisition, an append for the renewal of a lease held well before its end, an append for the demand)", got)
	}
	if failed != failedBefore {
		t.Fatalf("%d requests failed", failed-failedBefore)
	}
}

// azuriteContainer returns a client of container name in the Azurite at
// serviceURL.
func azuriteContainer(t *testing.T, serviceURL, name string) *container.Client {
	t.Helper()
	cred, err := container.NewSharedKeyCredential(azuriteAccount, azuriteKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := container.NewClientWithSharedKeyCredential(serviceURL+"/"+name, cred, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// logGenerations lists the generations of the lease log in container.
func logGenerations(t *testing.T, serviceURL, name string) []string {
	t.Helper()
	c := azuriteContainer(t, serviceURL, name)
	prefix := azureblob.TableLogPrefix
	var names []string
	pager := c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix})
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			t.Fatalf("list the log: %v", err)
		}
		for _, b := range page.Segment.BlobItems {
			names = append(names, *b.Name)
		}
	}
	return names
}

// TestTableLogRollsOver has three managers that seal a generation of the
// log every 2 KiB make 150 changes between them: the log moves on by many
// generations, no more than three are kept, every manager agrees on the
// table throughout, and leases and demands written in one generation hold
// in the next (a holder renews, another owner is refused, a manager that
// starts afresh reads the same table).
func TestTableLogRollsOver(t *testing.T) {
	t.Parallel()
	serviceURL := azuriteURL(t)
	name := uniqueContainer()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const partitions = 12
	ms := make([]*azureblob.TableLeaseManager, 3)
	owners := make([]string, len(ms))
	for i := range ms {
		ms[i] = newAzuriteTable(t, serviceURL, name)
		azureblob.SetTableRollBytes(ms[i], 2048)
		owners[i] = uuid.NewString()
	}
	if err := ms[0].Provision(ctx, partitions, nil); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	// Each manager holds the partitions p with p%3 == i, and publishes its
	// demand, over and over.
	for round := 0; round < 25; round++ {
		for i, m := range ms {
			mine := []int{}
			for p := i; p < partitions; p += len(ms) {
				mine = append(mine, p)
			}
			op := m.AcquireBatch
			if round > 0 {
				op = m.RenewBatch
			}
			res, err := op(ctx, mine, owners[i], 30*time.Second)
			if err != nil {
				t.Fatalf("round %d, manager %d: %v", round, i, err)
			}
			for k, r := range res {
				if r != nil {
					t.Fatalf("round %d, manager %d, partition %d: %v", round, i, mine[k], r)
				}
			}
			if err := m.PublishDemand(ctx, owners[i], uint32(round+1), 30*time.Second); err != nil {
				t.Fatalf("round %d, PublishDemand %d: %v", round, i, err)
			}
			// Another owner cannot take a partition this one holds.
			other := owners[(i+1)%len(ms)]
			if err := m.Acquire(ctx, mine[0], other, 30*time.Second); !errors.As(err, new(lease.ConflictError)) {
				t.Fatalf("round %d: Acquire(%d) by a non-holder = %v, want a ConflictError", round, mine[0], err)
			}
		}
	}
	gens := logGenerations(t, serviceURL, name)
	if len(gens) == 0 || len(gens) > 3 {
		t.Fatalf("log blobs %v, want 1 to 3 (older generations deleted)", gens)
	}
	last := gens[len(gens)-1]
	if last < azureblob.TableLogPrefix+"000000010" {
		t.Fatalf("latest generation %s after 225 changes of about 150 bytes each in 2-KiB generations, want 10 or more", last)
	}
	fresh := newAzuriteTable(t, serviceURL, name)
	want, err := fresh.Snapshot(ctx, partitions)
	if err != nil {
		t.Fatalf("Snapshot of a fresh manager: %v", err)
	}
	for p, st := range want.Partitions {
		if st != lease.PartitionLeased {
			t.Fatalf("partition %d is %v in a fresh reading, want leased", p, st)
		}
	}
	for i, m := range ms {
		got, err := m.Snapshot(ctx, partitions)
		if err != nil {
			t.Fatalf("Snapshot %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("manager %d reads %+v, a fresh manager %+v", i, got, want)
		}
		if want.Demands[owners[i]] != 25 {
			t.Fatalf("demand of manager %d = %d, want 25", i, want.Demands[owners[i]])
		}
	}
}

// TestTableLogWrittenAnew deletes the container under a manager that has
// read the log and has another manager write a new log with another
// partition count: the first one's next reading is of the new log, not a
// mix of both.
func TestTableLogWrittenAnew(t *testing.T) {
	t.Parallel()
	serviceURL := azuriteURL(t)
	name := uniqueContainer()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := newAzuriteTable(t, serviceURL, name)
	if err := a.Provision(ctx, 4, nil); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	owner := uuid.NewString()
	for p := 0; p < 4; p++ {
		if err := a.Acquire(ctx, p, owner, 30*time.Second); err != nil {
			t.Fatalf("Acquire(%d): %v", p, err)
		}
	}
	if _, err := azuriteContainer(t, serviceURL, name).Delete(ctx, nil); err != nil {
		t.Fatalf("delete the container: %v", err)
	}
	// Azurite may refuse to create a container it is still deleting.
	b := newAzuriteTable(t, serviceURL, name)
	eventually(t, 20*time.Second, "the log written anew", func() bool { return b.Provision(ctx, 8, nil) == nil })
	if err := b.Acquire(ctx, 6, uuid.NewString(), 30*time.Second); err != nil {
		t.Fatalf("Acquire(6) in the new log: %v", err)
	}
	snap, err := a.Snapshot(ctx, 8)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	want := []lease.PartitionState{lease.PartitionFree, lease.PartitionFree, lease.PartitionFree, lease.PartitionFree,
		lease.PartitionFree, lease.PartitionFree, lease.PartitionLeased, lease.PartitionFree}
	if !reflect.DeepEqual(snap.Partitions, want) {
		t.Fatalf("after the log was written anew, the first manager reads %v, want %v", snap.Partitions, want)
	}
	if err := a.Renew(ctx, 0, owner, 30*time.Second); !errors.As(err, new(lease.ConflictError)) {
		t.Fatalf("Renew of a lease of the deleted log = %v, want a ConflictError", err)
	}
}
