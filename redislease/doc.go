// Package redislease keeps the partitions, leases and demand records of a
// sharing.Resource in Redis, so that replicas of a service that already
// run Redis can share one capacity (a datastore's RU/s, a rate limit) without
// Azure Storage. It lives in its own package so that the batcher module's
// core does not depend on go-redis.
//
//	client := redis.NewClient(&redis.Options{Addr: "cache:6379"})
//	res := redislease.NewSharedResource(client, "orders-db", 20000).
//		WithFactor(1000).
//		WithReservedCapacity(2000)
//
// # Keys and round trips
//
// A resource with key prefix p uses three kinds of keys, all beginning with
// the hash tag {p}, so that they fall in one slot of a Redis Cluster and every
// script touches a single shard; the same code runs on a single server,
// behind Sentinel (redis.NewFailoverClient) or on a cluster. Resources with
// different prefixes hash to their own slots, so a cluster spreads them.
//
//	{p}:partitions   set of the indexes of the provisioned partitions (the
//	                 equivalent of Azure's container and blobs)
//	{p}:lease:<i>    the owner of the lease on partition i, with a PX expiry
//	{p}:demand       hash: owner -> "partitions:expiresAtMillis"
//
// Every LeaseManager method is one Lua script (EVALSHA, falling back to EVAL
// when a restarted server has forgotten it) or one command, hence one round
// trip. Acquire is SET NX PX guarded by a check that the partition exists, so
// a store that came back empty answers lease.PartitionMissingError and the
// SharedResource provisions again. Renew and Release compare the stored owner
// first and never extend or delete another owner's lease. Snapshot reads the
// partitions, the leases and the live demand records at one instant and
// deletes the records that lapsed.
//
// # Time
//
// Only the Redis server's clock decides when something in the store ends:
// leases through PX, demand records through an expiry computed from TIME
// inside the scripts. The instances' clocks are never compared with the
// server's or with each other's, so an offset between them cannot make two
// instances count one partition. The SharedResource measures its own side
// with its own clock: it counts a lease from the reply to the acquire or
// renew until the moment it sent that request + the lease duration − a safety
// margin (max(2 s, 10 %), at most a quarter of the lease). The server started
// the lease no earlier than the request was sent, so the instance stops
// counting before the server can hand the partition to someone else, as long
// as the two clocks run at rates that differ by less than the margin over one
// lease.
//
// # What holds when Redis loses writes
//
// The argument above assumes that a lease the server acknowledged stays in
// the store for its duration. Redis does not promise that. Replication is
// asynchronous: the primary answers the SET before any replica has it, and
// if the primary dies in that gap and Sentinel or the cluster promotes a
// replica, the lease is gone. A server without persistence that restarts
// loses every lease at once. In both cases another instance can acquire the
// partition while its first holder still counts it. These are the objections
// that Martin Kleppmann raised against Redlock: a lock on an asynchronously
// replicated store, guarded by timing alone, is not a mutual-exclusion
// guarantee, and only a fencing token checked by the protected resource
// would make it one.
//
// A server that restarts empty is handled without over-use by the
// SharedResource itself (see sharing.HoldOwner): the first instance to
// notice the loss publishes a hold before it provisions the partitions
// again, every instance re-takes exactly the partitions it still validly
// counts, and the others stay free until every lease granted before the
// loss has stopped counting. Measured with three instances sharing 20,000 in
// 20 partitions: no over-use, and 90 % of the capacity leased again within
// 2 s of the server answering (TestWipeNoOverUse). WithRestartHold is no
// longer needed for that case. A lease that stopped counting before the
// server came back empty (an outage longer than what was left of it) is
// not re-taken: nothing tells when the data was lost, so its partition waits
// for the hold, one lease duration.
//
// An outage that keeps the data (a server stopped and started again with
// appendonly, one frozen with SIGSTOP, a network cut) costs no more than
// itself: when the server answers again each instance notices within its
// back-off (at most 2 x maxInterval), renews what it still holds and takes
// again what lapsed meanwhile. Measured with four instances sharing 20,000
// in 20 partitions, the go-redis client's defaults and 15-s leases, after
// outages of 1 to 30 s: no over-use, and at least 90 % of the capacity
// counted and leased within 2 s of the server answering, and kept
// (TestOutageRecovery).
//
// A lost write the instances do not notice as a loss is another matter:
// a failover to a replica that lacks some leases, while the partitions
// themselves still exist. What this package guarantees then is a bound. The
// first holder keeps
// counting a lost lease at most until its deadline, request sent + lease
// duration − margin; earlier if its next renewal finds another owner. So
// each lost lease write lets at most one extra factor of capacity be used, for
// at most the lease duration minus the margin: 13 s with the SharedResource's
// default 15 s lease. For sharing a datastore's throughput that means a short
// spell of over-use and perhaps throttling, not corruption; if your use cannot
// tolerate even that, do not rely on leases in an asynchronously replicated
// store for it.
//
// To narrow or close the window:
//
//   - Run a single primary with no automatic failover, and either persistence
//     (appendonly yes, appendfsync always) or WithRestartHold set to the lease
//     duration: a resource whose keys vanished then blocks its recreated
//     partitions until every lease granted before the loss has stopped
//     counting, at the price of one lease duration before the first lease.
//   - With replicas, use WithReplicaAcks(1, timeout): a lease counts only
//     once a replica has it (WAIT). Sentinel and Redis Cluster promote the
//     most up-to-date replica they can reach, so an acknowledged lease
//     usually survives a failover; WAIT does not make Redis strongly
//     consistent, so a partition of the network can still lose one.
//   - Set min-replicas-to-write 1 and min-replicas-max-lag 10 on the
//     primary, so that a primary cut off from its replicas stops accepting
//     lease writes within about ten seconds instead of granting leases that
//     the promoted replica will never see.
//   - Choose the lease duration for the overlap you can accept: the bound is
//     duration − margin, and a shorter lease costs more renewals (one per
//     held partition every two thirds of a lease). WithLeaseDuration(6 *
//     time.Second) on the SharedResource gives a margin of 1.5 s, an overlap
//     of at most 4.5 s and a renewal every 4 s per partition.
//   - Keep the servers' clocks synchronised. Since Redis 7 expiries are
//     replicated as absolute times, so a promoted replica whose clock is ahead
//     of the old primary's ends every lease early by that offset.
//
// A Manager holds no goroutines and is safe for concurrent use.
package redislease
