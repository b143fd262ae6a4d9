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
// DESIGN.md beside this package explains the design in full.
package redislease
