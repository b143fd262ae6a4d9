// Package redislimit keeps the states of package limit's keyed limits in
// Redis, so that the replicas of a service share one limit per key. It lives
// in its own package so that package limit does not depend on go-redis.
//
//	client := redis.NewClient(&redis.Options{Addr: "cache:6379"})
//	store, err := redislimit.New(client, redislimit.Options{})
//	dec, err := store.AllowN(ctx, "alice", limit.GCRA(limit.PerSecond(10), 20), 1)
//
// # One round trip
//
// Every method is one Lua script run with EVALSHA (EVAL when the server has
// forgotten the script, which loads it again), so a decision, including one
// on several limits, is one round trip and is atomic. The script computes
// with the same integer arithmetic as the memory store, and the same
// conformance suite (package limittest) runs against both.
//
// On a single server (a *redis.Client), AllowN calls under the token
// bucket, GCRA and fixed window share their round trips: the calls made
// while Options.MaxInFlight earlier batches wait for the server go together
// in the next script call, which decides them one after the other, exactly
// as separate calls in that order would. A batch reads every key with one
// MGET and the clock with one TIME, and writes one SET per key it changed,
// so under load a decision costs the server well under the four commands
// (EVALSHA, TIME, GET, SET) of a call on its own. On a cluster or a ring
// every call is sent on its own, since one script may only touch one slot.
//
// # Local allowances
//
// With Options.LocalAllowance, a token bucket or GCRA key decided at least
// 16 times a second for a second at one store is decided there from units
// taken out of its Redis state, which records them as lent to that store:
// the sum admitted across stores never exceeds the limit. A goroutine per
// store renews the units before they run out; Close gives them back.
// Allowed and denied answers stay exact; on such keys Remaining and
// ResetAfter are estimates and RetryAfter may be later than a one-trip
// call's, never earlier. Store.AllowanceStats counts the units lent, given
// back and lost, and the decisions answered locally. See
// DESIGN-allowances.md.
//
// With Options.ColdLease as well, keys that are not hot are lent too: a
// one-trip decision on a token bucket or GCRA key with at least half its
// limit free takes a few units along (at most an eighth of the limit), in
// the same script call, for that long; later decisions on the key at this
// store spend them without a call, and the decision that finds them low
// starts a renewal beside it, which reports what was spent and extends the
// lease with more units, again in one call. A report counts the lease's
// spends from its grant, so one sent again after a lost answer (a timeout)
// charges nothing twice, and units a lost answer granted are given back
// when the lease is ended by a call (a decision, Close), or else charged
// at its end in Redis. Together the
// stores hold at most half of a key's limit in cold leases. What they hold
// unspent is lost to the key until it is given back or the lease ends.
//
// # Deadlines
//
// Every call returns when its context ends, whatever the go-redis client's
// options: a call is waited for on its own goroutine or in its batch, not
// through the client's read timeout, which bounds a call only with
// ContextTimeoutEnabled. A call whose context has ended before it is sent is
// never sent: a batched call whose context ends while it waits for its batch
// is dropped, and a call sent alone that ends while the client waits for a
// free connection is not written. A call already written cannot be recalled:
// if the server stops answering (frozen, overloaded), the server applies it
// when it reads it again, although its caller was answered with its
// context's error (or, behind limit.WithFailurePolicy, by the failure mode).
// That is at most MaxInFlight batches of up to MaxBatch calls, and for calls
// sent alone at most one per connection of the client's pool; behind a
// failure policy, only the calls in flight when the server stopped and then
// one probe at a time.
//
// With LocalAllowance, a decision that takes units for its key's allowance
// returns when its context ends as well, but its take goes on, on a context
// of its own bounded as a renewal's (the allowance lease, at least a
// second): its answer, when it comes, is taken in, so that the units it
// granted and those the store set aside for it are the store's to spend
// rather than left lent in Redis until their lease ends. So is the answer
// to a one-trip decision that asks for a cold lease, once the call is sent:
// the store waits for it past the caller's deadline, as long as for an
// early renewal and no longer, whatever the client's timeouts, and keeps or
// gives back the lease it lent; an answer that does not come by then is
// given up, and the lease stays lent in Redis until its end. A batch waits
// for it whatever the client's options; a call sent alone (a cluster, or
// MaxBatch 1) only on a client without ContextTimeoutEnabled, since with it
// go-redis ends the read at the caller's deadline, and the lease then stays
// lent in Redis until its end.
//
// Close returns by its context too: once that ends, so do the store's
// background calls and waits (renewals, takes whose callers left, answers
// awaited), and what they would have taken in or given back stays lent in
// Redis until its lease ends.
//
// # Time
//
// The script reads the Redis server's clock (TIME). The application
// servers' clocks are never used, so an offset between them cannot let one
// replica spend what another already spent. Options.Clock replaces the
// server's clock for tests only.
//
// # Keys
//
// The state of key k under a policy named n with algorithm a is kept at
//
//	<prefix>{k}:n:a
//
// where the default prefix is "limit:" and a is tb, gcra, fw, rw or sw
// (token bucket, GCRA, fixed, rolling and sliding window). The braces are a Redis Cluster hash
// tag around the limited key, not around the prefix, so that the keys spread
// over the cluster's slots while every policy of one key falls in one slot:
// AllowAll on several policies of one key works on a cluster. A key that
// already holds a hash tag (a non-empty "{...}") is used as it is, so limits
// on different keys that must be decided together can share a tag, for
// example "{tenant-7}:alice" and "{tenant-7}" for a user and its tenant.
// A key that is empty or starts with "}" or a backslash has no usable tag
// in braces ("{}x}" is no tag to Redis), so its tag is a backslash and the
// key's 64-bit FNV-1a hash in hex, followed by the key:
//
//	<prefix>{\<hash>}k:n:a
//
// Every policy of any key string thus shares one slot. AllowAll on keys of
// different slots fails on a cluster with a *CrossSlotError; a single
// server accepts any keys.
//
// A denied decision writes nothing. Every written key expires (PX) when its
// state is back at rest, so Redis holds nothing for idle keys. Memory per
// key, measured with MEMORY USAGE on Redis 7.0 (see the package README):
// token bucket and GCRA are one short string each.
package redislimit
