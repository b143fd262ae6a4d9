// Package sharing shares one capacity among the instances (processes,
// replicas) of a service through exclusive expiring leases on partitions of
// it, kept in a store behind lease.Manager. Resource is the algorithm, a
// RateLimiter for package batcher; MemoryLeaseManager is the in-process
// store for tests and single-process use. Package azureblob and package
// redislease hold the Azure Blob Storage and Redis stores; package batcher
// names these types under their go-batcher v1.8.0 names (SharedResource,
// NewSharedResource, MemoryLeaseManager).
//
// # How a Resource shares capacity
//
// The shared capacity is split into P = ceil(shared/factor) partitions. An
// instance may use one factor of capacity for each partition on which it
// holds an exclusive, expiring lease in the coordination store (the
// lease.Manager), plus its reserved capacity, which needs no lease. When
// shared is not a multiple of factor the last partition is worth only the
// remainder, so that the partitions add up to exactly the shared capacity
// and no instance, nor all of them together, ever counts more.
//
// One goroutine per instance, the loop, owns the lease table; Capacity reads
// a view of it that the loop publishes. GiveMe turns the target into the
// number of partitions wanted, W = ceil((target-reserved)/factor) clamped to
// [0, P], and wakes the loop when W changes. A fall of W other than to zero
// is held for 2 x maxInterval, so a target that flaps with every batch does
// not make partitions change hands. Each pass of the loop:
//
//  1. Publishes W as this instance's demand: a rise just before its next
//     listing, a fall at once (zero withdraws the record), and otherwise as
//     a heartbeat every lease/3 with a ttl of one lease, so the record of an
//     instance that died lapses.
//  2. Renews each held lease once two thirds of it have passed.
//  3. When a listing is due, reads a snapshot (one round trip: which
//     partitions are free, leased or missing, and every live demand) and
//     computes the max-min fair share of the P partitions among the
//     demands, its own being W. Every instance computes the same shares from
//     the same demands, so no instance needs to talk to another. When the
//     partitions do not divide evenly (R of them left over among the A
//     instances that want more, and with more instances than partitions R is
//     every partition), the R extra partitions go to R consecutive instances
//     in owner order, and move on by one instance every rotation period / R
//     (WithRotation, 3 s by default; epochs of at least 100 ms counted from
//     the Unix epoch), so that each instance keeps an extra partition for a
//     period, the hand-overs come one at a time rather than all at once (the
//     store serves them as a trickle, not a burst at each period's
//     boundary), and over A/R periods every instance gets its
//     share of capacity-seconds. A split that is already fair as it stands
//     (Jain's index of the shares at least 0.99, and nobody left with
//     nothing: 3 and 4 partitions, say) does not rotate, which saves the
//     release and the acquisition every moved partition costs. At an epoch's
//     boundary the two instances whose shares change recompute them
//     from the demands they last read, without a storage call; the one that
//     loses a partition releases it at once, the one that gains lists 5 ms later and
//     take disjoint places among the freed partitions, listing again after
//     waits that double from 10 ms while they are not yet free (for up to
//     half a second). With more instances than partitions (every share a
//     single partition, so every boundary hands every partition over) any
//     change in who asks moves every turn; the instances read such a change
//     at their next listings, over a second or so, so a turn held keeps
//     running to the boundary where it would have ended, and meanwhile the
//     instances whose turn it now is take what is free. Its target is
//     min(W, share); since max-min fairness gives partitions nobody else
//     wants to those who want more, an instance alone gets all it asks for.
//  4. Releases the leases above its target at once, and tries, in parallel
//     (at most 8 at a time), as many partitions as it lacks among those the
//     snapshot shows free: first in its home range (the shares laid end to
//     end in owner order, disjoint between instances), then in an order
//     particular to it (rendezvous hashing), so instances rarely race.
//
// Listings come every maxInterval/2 to maxInterval (random) while the
// instance holds less than its target or something moved at its last
// listing (its holding, or any instance's demand), and every 1.5 to 2.5
// maxInterval once settled, so a change of demand anywhere is seen within about a
// second with the default maxInterval of 500 ms; and never sooner than four
// times the last listing's duration after it (adding at most 2 maxInterval
// while things move at the instance), so that a store that answers slowly
// because it is overloaded gets fewer listings until it recovers, while an
// instance that took too much in a burst of starts still sees the others'
// demands within a second or so. A listing that failed is paced by the
// back-off alone: its duration is the call's timeout, not the store's pace. A rise of W wakes the loop
// at once (listings at most every maxInterval/4), so one instance ramps
// from nothing to every partition in a single pass: one demand, one
// snapshot and P acquires, 8 at a time. An idle instance (W = 0, nothing
// held) makes no storage calls. At full contention with the defaults an
// instance settled on 5 partitions makes about 60 listings, 30 renewals and
// 12 heartbeats a minute (about 102 transactions, none failing once
// settled); on a store that renews every lease due in one call (a
// lease.BatchRenewer: memory and Redis) the leases due within the next
// lease/3 are renewed along with one that is due, so the leases line up and
// the renewals are one call per round whatever the partitions held: about
// 60 + 6 + 12 = 78.
//
// Validity: a lease counts as capacity from the moment its acquire or renew
// returned success until the moment that request was sent + the lease
// duration - a margin of max(2 s, 10 %) (at most a quarter of the lease).
// Because the store started the lease no earlier than the request was sent,
// the instance stops counting it before the store could give it to another
// instance, however long the process stalls, provided the two clocks' rates
// differ by less than the margin over one lease. Capacity compares against
// the clock when it is called, so a lease is never counted after its
// deadline even when the loop is stalled. A lease whose renewal fails with a
// conflict after its deadline is dropped at once; one refused while still
// valid was lost by the store (no other instance can have been granted it),
// and is handled as a data loss, below; one whose renewal fails with an
// error stops counting at its deadline and is retried with back-off. Leases are
// removed from the view before they are released. The guarantee assumes the
// store keeps its leases: a store that loses its data loses them too, and
// an instance learns of it at its next listing or renewal (a partition it
// counts shown free or missing, a renewal refused or answered "missing").
// Then it keeps counting the leases that are still valid, publishes a hold
// (HoldOwner) before it provisions the store again, and re-takes exactly
// those partitions; while the hold is live no instance acquires any other
// partition, so a partition that an instance which has not yet noticed the
// loss still counts cannot be given to another. The hold lasts one lease
// duration, the longest any lease granted before the loss can count. Nothing
// tells how long before it came back empty the store lost its data, so a
// partition whose lease stopped counting before the loss was noticed (an
// outage longer than what was left of the lease, then an empty store) is
// taken again only when the hold ends.
//
// Faults: a storage error raises an error event and backs the loop off
// exponentially from maxInterval (with jitter, at most 2 x maxInterval and
// lease/4, so that a store that comes back is noticed within a second, and
// renewals still get tries); capacity falls to the reserved capacity plus
// the leases still valid. A store that lost its partitions (a
// lease.PartitionMissingError, or missing partitions in a snapshot) is
// provisioned again without a restart. When the store answers again after
// an outage, each instance notices within one back-off (at most 2 x
// maxInterval), renews what it still holds and lists at once. An outage
// longer than a third of a lease lets demand records lapse, every
// instance's at once; for 2 x maxInterval after its first listing that
// follows such an outage an instance still counts the demands it read before
// it, so that the first instance back does not take every partition and
// hand most of them back a moment later.
//
// Stop releases every lease (it stops counting them first), withdraws the
// demand and waits for the loop, so other instances can take the partitions
// at once.
//
// Sizing: SIZING.md, beside this file, tells an operator how to choose the
// factor, the number of partitions and the lease duration for a capacity, a
// replica count and a store, with the measured calls, convergence and loss
// of 4 to 128 instances over 20 to 500 partitions.
package sharing
