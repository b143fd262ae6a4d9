package batcher_test

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/costwise/batcher"
)

// Two replicas of a service write to one datastore that accepts 1,000 cost
// units a second in all. Each runs a Batcher whose rate limiter is a
// SharedResource over one lease store (here in memory; Azure Blob Storage or
// Redis between processes), so the budget is shared and batches are
// released within it.
func Example_twoReplicas() {
	store := batcher.NewMemoryLeaseManager()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var written atomic.Int64
	replica := func(name string) (batcher.IBatcher, *batcher.SharedResource) {
		budget := batcher.NewSharedResource(store, 1000).WithFactor(100).WithMaxInterval(50)
		if err := budget.Provision(ctx); err != nil {
			log.Fatal(err)
		}
		if err := budget.Start(ctx); err != nil {
			log.Fatal(err)
		}
		b := batcher.NewBatcher().WithRateLimiter(budget)
		if err := b.Start(); err != nil {
			log.Fatal(err)
		}
		w := batcher.NewWatcher(func(batch []batcher.IOperation) {
			written.Add(int64(len(batch))) // one write of the batch to the datastore
		}).WithMaxBatchSize(10)
		for i := 0; i < 40; i++ {
			if err := b.Enqueue(batcher.NewOperation(w, 10, name, true)); err != nil {
				log.Fatal(err)
			}
		}
		return b, budget
	}
	a, budgetA := replica("a")
	b, budgetB := replica("b")
	for _, r := range []batcher.IBatcher{a, b} {
		if err := r.Shutdown(ctx); err != nil {
			log.Fatal(err)
		}
	}
	budgetA.Stop()
	budgetB.Stop()
	fmt.Println("operations written:", written.Load())
	// Output: operations written: 80
}

// A ProvisionedResource's capacity can change while the batcher runs, as
// when the datastore's provisioned throughput changes: at zero nothing of
// positive cost is released and operations wait in the buffer; a new
// capacity lets them go.
func ExampleProvisionedResource_SetCapacity() {
	limiter := batcher.NewProvisionedResource(0)
	limiter.AddListener(func(event string, val int, _ string, _ interface{}) {
		if event == batcher.CapacityEvent {
			fmt.Println("capacity:", val)
		}
	})
	limiter.SetCapacity(100) // MaxCapacity is now 100, so ops up to 100 are accepted
	limiter.SetCapacity(0)

	b := batcher.NewBatcher().WithRateLimiter(limiter)
	if err := b.Start(); err != nil {
		log.Fatal(err)
	}
	var written atomic.Int64
	w := batcher.NewWatcher(func(batch []batcher.IOperation) { written.Add(int64(len(batch))) })
	for i := 0; i < 3; i++ {
		if err := b.Enqueue(batcher.NewOperation(w, 10, i, false)); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("waiting:", b.OperationsInBuffer())

	limiter.SetCapacity(1000)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("written:", written.Load())
	// Output:
	// capacity: 100
	// capacity: 0
	// waiting: 3
	// capacity: 1000
	// written: 3
}

// entraCredential stands for the service's Microsoft Entra ID credential:
// usually azidentity.NewDefaultAzureCredential(nil) (environment, workload
// identity, managed identity or developer tools), from the module
// github.com/Azure/azure-sdk-for-go/sdk/azidentity, which this module does
// not require.
func entraCredential() azcore.TokenCredential { return nil }

// An AzureSharedResource shares a capacity between replicas through leases
// on blobs in one container, authenticated with Microsoft Entra ID. The
// identity needs the Storage Blob Data Contributor role. It needs a storage
// account, so it is compiled but not run.
func ExampleNewAzureSharedResource() {
	cred := entraCredential()
	limiter := batcher.NewAzureSharedResource("mystorageaccount", "orders-capacity", 10000).
		WithCredential(cred).
		WithFactor(1000).
		WithReservedCapacity(500)
	ctx := context.Background()
	if err := limiter.Provision(ctx); err != nil {
		log.Fatal(err)
	}
	if err := limiter.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer limiter.Stop()

	b := batcher.NewBatcher().WithRateLimiter(limiter)
	if err := b.Start(); err != nil {
		log.Fatal(err)
	}
	defer b.Stop()
}
