package azureblob_test

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/costwise/batcher/azureblob"
)

// A shared resource in the lease table layout: 8 replicas share 50,000
// RU/s in 100 partitions of 500 RU/s, about 12 each. In the blob-per-
// partition layout each replica would renew its 12 leases one by one (about
// 150 storage calls a minute); in the table it renews them in one write and
// reads the state of every partition in one small read (about 90). Every
// replica sharing the container must use the same layout. It needs a
// storage account, so it is compiled but not run.
func ExampleNewTableSharedResource() {
	limiter := azureblob.NewTableSharedResource("mystorageaccount", "orders-capacity", 50000).
		WithConnectionString(os.Getenv("AZURE_STORAGE_CONNECTION_STRING")).
		WithFactor(500).
		WithLeaseDuration(30 * time.Second)
	ctx := context.Background()
	if err := limiter.Provision(ctx); err != nil {
		log.Fatal(err)
	}
	if err := limiter.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer limiter.Stop()
	limiter.GiveMe(12000) // the partitions this replica's work needs now
	log.Printf("capacity now: %d RU/s", limiter.Capacity())
}
