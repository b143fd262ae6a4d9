// Package batcher releases work to a datastore in batches, never faster than
// the capacity the datastore gives you, and lets the replicas of a service
// share that capacity with nothing else to run.
//
// A Batcher (one per datastore, long-lived) buffers Operations, each with a
// cost, a payload and the Watcher whose callback receives it. Batchable
// operations are grouped per watcher, at most MaxBatchSize each; a full batch
// or a non-batchable operation goes as soon as the credit allows, and a batch
// that is not full waits at most one flush interval. The credit grows at the
// RateLimiter's Capacity per second, capped at one flush interval's worth, so
// with a backlog the released cost per second equals the capacity, and no
// window of up to a second sees more than the capacity over the window, one
// flush interval's worth, 7 ms' worth of tolerance and one operation.
//
// ProvisionedResource is a fixed capacity. SharedResource splits a shared
// capacity into partitions and holds exclusive expiring leases on them in a
// store behind the LeaseManager interface: NewMemoryLeaseManager (in process),
// AzureSharedResource (Azure Blob Storage) and package redislease (Redis).
// WithFairRelease shares the capacity among watchers by weight and priority;
// Operation.SetActualCost charges the credit what a batch really cost.
//
// The shared resources live in packages below this one (lease, sharing,
// azureblob, redislease, leasetest); none of them imports this package, and
// this package keeps their go-batcher v1.8.0 names as aliases in compat.go,
// so code written against v1.8.0 compiles unchanged.
//
// Every exported method is safe for concurrent use, except the With methods,
// which configure an object before Start. One goroutine owns each object's
// state; listeners run on a goroutine of their own, in event order, never
// with a lock held; Stop leaves no goroutine of the library running. Time
// comes from a Clock (WithClock); package batchertest has fakes for tests.
//
// DESIGN.md in the repository explains the credit arithmetic, fair release,
// actual costs and the concurrency model in full.
package batcher
