package azureblob_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

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
// agrees with the table, and no write was lost to a conflict.
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
// call makes: a read and a write for the first change, and one more write
// for a change right after it (over the table it just wrote).
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
	after, failed := m.Requests()
	if got := after - before; got != 2 {
		t.Fatalf("Acquire then RenewBatch right after Provision sent %d requests, want 2 (one write each over the cached table)", got)
	}
	if failed != failedBefore {
		t.Fatalf("%d requests failed", failed-failedBefore)
	}
}
