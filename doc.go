// Package batcher releases work to a datastore in batches, never faster than
// the capacity the datastore gives you, and lets the replicas of a service
// share that capacity with nothing else to run.
//
// # The model
//
// A Batcher (one per datastore, long-lived) buffers Operations. Each
// Operation has a cost (for example Cosmos DB request units), a payload, and
// the Watcher it belongs to (typically one per HTTP request or job). The
// batcher groups batchable operations per watcher, at most the watcher's
// MaxBatchSize per batch, and hands each batch to the watcher's callback on
// a goroutine of its own. A batch that is full, and an operation that is not
// batchable, goes as soon as the capacity allows; a batch that is not full
// waits at most one flush interval.
//
// The target is the total cost of the operations accepted and not yet done:
// it grows when Enqueue accepts an operation and shrinks when the callback of
// its batch returns, or when the batch's MaxOperationTime passes, whichever
// comes first. Every capacity interval the batcher asks its RateLimiter for
// the target (GiveMe) and raises a request event. Every audit interval it
// checks the target: with nothing buffered and nothing released for a
// MaxOperationTime, a target above zero is a leak, and it is reset.
//
// # Capacity and credit
//
// A RateLimiter reports a Capacity in cost per second. The batcher keeps a
// credit that grows at Capacity() per second of elapsed time, capped at one
// flush interval's worth (capacity × flush interval), so an idle batcher
// never banks a burst. An operation of positive cost may be released while
// the credit is positive; its cost is then subtracted, so the credit goes
// negative by less than one operation, and that debt is repaid before
// anything else of positive cost goes. Operations of zero cost need no
// credit. The arithmetic is in integer nano-units, so with a backlog the
// released cost per second equals the capacity for any flush interval and
// any operation cost, at zero capacity nothing of positive cost is released,
// and Flush cannot raise the rate. Between flushes a batch of several
// operations is released only when the credit pays for all of it, so that
// batches are not cut up, or, when it costs more than the cap, once the
// credit is at the cap, in the part the credit pays for; at a flush a batch
// may be split to use the credit, with a tolerance of a few milliseconds'
// worth of capacity below zero so that timer jitter at a tick cannot push a
// release a whole interval later.
// While operations wait for credit, a wake-up of the loop that timer slack
// made a few milliseconds late does not forfeit the capacity that accrued
// meanwhile; a longer absence (a listener that blocks the loop, a stopped
// process) is a stall, and the capacity it missed is not made up: after any
// stall no window of up to a second sees more than the capacity over the
// window, one flush interval's worth, the flush tolerance and the 2-ms
// catch-up (together at most 7 ms' worth) and one operation.
//
// With 10,000 cost per second and the default 100 ms flush interval, each
// flush interval releases about 1,000 cost; batches that fill up in between
// go as soon as the credit has grown enough to pay for them.
//
// # Fair release and actual costs
//
// By default ready batches go in the order they closed. With
// WithFairRelease the capacity is shared among the watchers that have
// batches ready, by start-time fair queuing on cost with a weight per
// watcher, in two priority classes: PriorityLow gets capacity while no
// high-priority batch is ready, plus LowPriorityShare (2 %) so that it never
// starves. A watcher's weight, class and name are set with WithWeight,
// WithPriority and WithName on *Watcher, or by implementing FairWatcher.
//
// A callback that learns what its operations really cost reports it with
// Operation.SetActualCost (or an operation type implementing ActualCoster):
// the credit is then charged or refunded the difference, so the rate the
// datastore sees is the capacity however wrong the estimates, and the target
// is scaled by the ratio of actual to estimated cost observed lately.
//
// # Rate limiters
//
// ProvisionedResource is a fixed capacity, changeable with SetCapacity.
// SharedResource splits a shared capacity into partitions worth one factor
// each (the last one only the remainder, so they add up to the shared
// capacity exactly) and holds exclusive expiring leases on them in a coordination store
// behind the LeaseManager interface: NewMemoryLeaseManager (in process, for
// tests and the sample), AzureSharedResource (Azure Blob Storage leases on
// zero-byte blobs) and package redislease (Redis). Each instance publishes
// its demand next to the partitions and takes its max-min fair share, so
// capacity moves to whoever needs it within about a second; the
// documentation of package sharing gives the algorithm, its convergence time
// and its cost in storage transactions. A reserved capacity per instance is
// always available.
//
// # Packages
//
// The shared resources live below this package, one package per concern:
// lease (the LeaseManager seam), sharing (the sharing algorithm and the
// in-memory store), azureblob and redislease (the Azure Blob Storage and
// Redis stores), and leasetest (the conformance suite every store passes,
// and a fault-injecting wrapper for tests). None of them imports this
// package; this package names their types under the go-batcher v1.8.0 names
// (SharedResource, AzureSharedResource, LeaseManager, ...) through aliases,
// so code written against those names compiles unchanged and errors.As
// matches either name.
//
// # Concurrency
//
// Every exported method of Batcher, the rate limiters and the lease managers
// is safe for concurrent use, except the With methods, which configure an
// object before it starts. One goroutine, started by Start and ended by
// Stop, owns each object's mutable state; Enqueue hands operations to it
// through a short mutex-guarded queue and does not allocate. A Batcher's
// listeners run on a goroutine of their own, in event order, never with a
// lock held: the loop only queues its events, so it never waits on a
// listener, and a listener may call any method, Stop, Shutdown, a blocking
// Enqueue and RemoveListener on itself included, without the batcher having
// to know which goroutine calls it. Stop leaves no goroutine of the library
// running, other than watcher callbacks still in progress, which Shutdown
// waits for, and the listener goroutine when Stop was called while a
// listener ran (that listener may be the caller); it ends once it has
// delivered the last events, the shutdown event last. The rate limiters call
// their listeners on the goroutine that raised the event.
//
// Time comes from a Clock (WithClock); package batchertest has a fake clock,
// a recording listener and a scriptable rate limiter for tests of code built
// on this package.
package batcher
