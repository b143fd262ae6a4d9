package redislease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/costwise/batcher/lease"

	"github.com/redis/go-redis/v9"
)

// DefaultKeyPrefix is the key prefix New uses when it is given an empty one.
// An empty hash tag would not pin the keys to one slot of a Redis Cluster.
const DefaultKeyPrefix = "batcher"

// Manager is a lease.Manager that keeps partitions, leases and demand
// in Redis. All its keys start with the hash tag {prefix}, so every script
// touches a single slot and runs unchanged on a single server, behind
// Sentinel, or on a Redis Cluster. Lease expiry and demand expiry are
// measured by the Redis server's clock, never by the caller's.
//
// A Manager is safe for concurrent use. It holds no goroutines and no state
// besides its configuration; closing the client is the caller's business.
type Manager struct {
	client     redis.UniversalClient
	tag        string // "{prefix}", the start of every key
	partitions string // set of the indexes of provisioned partitions
	demand     string // hash owner -> "partitions:expiresAtMillis"
	address    string // shown in provisioning events
	acks       int    // replicas that must acknowledge a lease write; 0 waits for none
	ackTimeout time.Duration
	hold       time.Duration // placeholder lease on partitions recreated in an empty store
}

var _ lease.Manager = (*Manager)(nil)

// Option configures a Manager made by New or NewSharedResource.
type Option func(*Manager)

// WithAddress sets the address shown in the msg of the provisioning events
// (CreatedContainerEvent, VerifiedContainerEvent) in place of the one read
// from the client's options. The events then carry "redis://address/{prefix}".
func WithAddress(address string) Option {
	return func(m *Manager) { m.address = address }
}

// WithReplicaAcks makes Acquire and Renew wait, with the WAIT command, until
// at least replicas replicas have acknowledged the lease write, for at most
// timeout. When fewer acknowledge in time, Acquire releases the lease again
// and returns a ReplicationError, and Renew returns one (the lease was
// extended on the primary, but a failover could lose the extension). The
// default, zero replicas, waits for none. It narrows, without closing, the
// window in which a failover loses a lease; see the package documentation.
// It needs a *redis.Client (single server or Sentinel) or a
// *redis.ClusterClient.
func WithReplicaAcks(replicas int, timeout time.Duration) Option {
	return func(m *Manager) {
		m.acks = max(replicas, 0)
		m.ackTimeout = max(timeout, time.Millisecond)
	}
}

// WithRestartHold makes Provision, when it finds the resource's keys gone
// (the first provisioning ever, a server that restarted without
// persistence, or a failover to a replica that never had them), hold every
// partition it creates for d before anyone can lease it. With d at least the
// lease duration, every instance has stopped counting the leases it held
// before the loss by the time new ones are granted, so the loss cannot make
// two instances count one partition. It is Redlock's "delayed restart" for
// one resource. The default, zero, holds nothing: recovery is immediate and
// the overlap is bounded instead (see the package documentation). The price
// is that a brand-new resource also waits d before its first lease.
func WithRestartHold(d time.Duration) Option {
	return func(m *Manager) { m.hold = max(d, 0) }
}

// holdOwner is the owner of the placeholder leases of WithRestartHold; no
// SharedResource uses it (they use UUIDs), so no caller can renew or release
// a placeholder.
const holdOwner = "redislease:restart-hold"

// New returns a Manager that keeps the partitions, leases and demand of one
// shared resource in Redis under keys starting with "{keyPrefix}:". Every
// replica that shares the capacity must use the same keyPrefix; an empty one
// becomes DefaultKeyPrefix. The client may be a single-server, Sentinel
// (failover) or cluster client.
func New(client redis.UniversalClient, keyPrefix string, opts ...Option) *Manager {
	if keyPrefix == "" {
		keyPrefix = DefaultKeyPrefix
	}
	tag := "{" + keyPrefix + "}"
	m := &Manager{
		client:     client,
		tag:        tag,
		partitions: tag + ":partitions",
		demand:     tag + ":demand",
		address:    clientAddress(client),
	}
	for _, opt := range opts {
		opt(m)
	}
	return m
}

// leaseKey is the key of the lease on partition i.
func (m *Manager) leaseKey(i int) string {
	return m.tag + ":lease:" + strconv.Itoa(i)
}

// keys returns heads followed by the lease keys of partitions 0..count-1:
// a script must name every key it touches so that Redis Cluster can route
// it (they all share one slot).
func (m *Manager) keys(count int, heads ...string) []string {
	keys := make([]string, 0, len(heads)+count)
	keys = append(keys, heads...)
	for i := 0; i < count; i++ {
		keys = append(keys, m.leaseKey(i))
	}
	return keys
}

// clientAddress names the server(s) a client talks to, for event messages.
func clientAddress(client redis.UniversalClient) string {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		return strings.Join(c.Options().Addrs, ",")
	}
	return ""
}

// URL returns "redis://address/{prefix}", the name provisioning events give
// to the resource's keys.
func (m *Manager) URL() string {
	return "redis://" + m.address + "/" + m.tag
}

// Provision makes sure partitions 0..count-1 exist, in one script. The set of
// partition indexes plays the part of Azure's container: CreatedContainerEvent
// when this call created it (the store was empty), VerifiedContainerEvent
// otherwise, then CreatedBlobEvent or VerifiedBlobEvent per partition.
func (m *Manager) Provision(ctx context.Context, count int, report func(event string, val int, msg string)) error {
	if count < 1 || count > lease.MaxPartitions {
		return fmt.Errorf("redislease: cannot provision %d partitions; the range is 1 to %d", count, lease.MaxPartitions)
	}
	keys := m.keys(count, m.partitions)
	res, err := provisionScript.Run(ctx, m.client, keys, count, holdMillis(m.hold), holdOwner).Slice()
	if err != nil {
		return m.fail(ctx, "provision", err)
	}
	created, flags, ok := parseProvision(res, count)
	if !ok {
		return fmt.Errorf("redislease: provision got an unexpected reply %v", res)
	}
	if report == nil {
		return nil
	}
	if created {
		report(lease.CreatedContainerEvent, 0, m.URL())
	} else {
		report(lease.VerifiedContainerEvent, 0, m.URL())
	}
	for i := 0; i < count; i++ {
		if flags[i] == '1' {
			report(lease.CreatedBlobEvent, i, "")
		} else {
			report(lease.VerifiedBlobEvent, i, "")
		}
	}
	return nil
}

// parseProvision decodes the reply of provisionScript.
func parseProvision(res []interface{}, count int) (created bool, flags string, ok bool) {
	if len(res) != 2 {
		return false, "", false
	}
	n, ok1 := res[0].(int64)
	flags, ok2 := res[1].(string)
	if !ok1 || !ok2 || len(flags) != count {
		return false, "", false
	}
	return n == 1, flags, true
}

// Snapshot reads the partitions and the live demand records in one script,
// at one instant of the server's clock, pruning the records that lapsed.
func (m *Manager) Snapshot(ctx context.Context, count int) (lease.Snapshot, error) {
	if count < 0 || count > lease.MaxPartitions {
		return lease.Snapshot{}, fmt.Errorf("redislease: cannot read %d partitions; the range is 0 to %d", count, lease.MaxPartitions)
	}
	keys := m.keys(count, m.partitions, m.demand)
	res, err := snapshotScript.Run(ctx, m.client, keys).Slice()
	if err != nil {
		return lease.Snapshot{}, m.fail(ctx, "snapshot", err)
	}
	snap, ok := parseSnapshot(res, count)
	if !ok {
		return lease.Snapshot{}, fmt.Errorf("redislease: snapshot got an unexpected reply %v", res)
	}
	return snap, nil
}

// parseSnapshot decodes the reply of snapshotScript.
func parseSnapshot(res []interface{}, count int) (lease.Snapshot, bool) {
	if len(res) == 0 || len(res)%2 != 1 {
		return lease.Snapshot{}, false
	}
	states, ok := res[0].(string)
	if !ok || len(states) != count {
		return lease.Snapshot{}, false
	}
	snap := lease.Snapshot{
		Partitions: make([]lease.PartitionState, count),
		Demands:    make(map[string]uint32, (len(res)-1)/2),
	}
	for i := 0; i < count; i++ {
		switch states[i] {
		case '1':
			snap.Partitions[i] = lease.PartitionFree
		case '2':
			snap.Partitions[i] = lease.PartitionLeased
		default:
			snap.Partitions[i] = lease.PartitionMissing
		}
	}
	for j := 1; j < len(res); j += 2 {
		owner, ok1 := res[j].(string)
		text, ok2 := res[j+1].(string)
		n, err := strconv.ParseUint(text, 10, 32)
		if !ok1 || !ok2 || err != nil {
			return lease.Snapshot{}, false
		}
		snap.Demands[owner] = uint32(n)
	}
	return snap, true
}

// Acquire takes the lease on partition for owner with SET NX PX inside a
// script that first checks that the partition exists.
func (m *Manager) Acquire(ctx context.Context, partition int, owner string, d time.Duration) error {
	if err := m.leaseWrite(ctx, "acquire", acquireScript, partition, owner, d); err != nil {
		var repl ReplicationError
		if errors.As(err, &repl) {
			// Do not leave behind a lease the caller will not count, even
			// when its context just ended; if the release fails too, the
			// lease simply expires after d.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.ackTimeout+time.Second)
			_ = m.Release(rctx, partition, owner)
			cancel()
		}
		return err
	}
	return nil
}

// Renew extends owner's lease on partition to d from now, by the server's
// clock, when owner holds it.
func (m *Manager) Renew(ctx context.Context, partition int, owner string, d time.Duration) error {
	return m.leaseWrite(ctx, "renew", renewScript, partition, owner, d)
}

// RenewBatch renews owner's leases on partitions, as Renew does for each,
// in one script call: a lease.BatchRenewer. With WithReplicaAcks, a lease
// the replicas did not acknowledge in time gets a ReplicationError.
func (m *Manager) RenewBatch(ctx context.Context, partitions []int, owner string, d time.Duration) ([]error, error) {
	if len(partitions) == 0 {
		return nil, nil
	}
	keys := make([]string, 0, len(partitions)+1)
	keys = append(keys, m.partitions)
	args := make([]interface{}, 0, len(partitions)+2)
	args = append(args, owner, millis(d))
	for _, p := range partitions {
		keys = append(keys, m.leaseKey(p))
		args = append(args, p)
	}
	var runner redis.Scripter = m.client
	var conn *redis.Conn
	if m.acks > 0 {
		// WAIT counts the writes of its own connection (see leaseWriteAcked).
		node, err := m.primaryFor(ctx, keys[0])
		if err != nil {
			return nil, m.fail(ctx, "renew", err)
		}
		conn = node.Conn()
		defer conn.Close()
		runner = conn
	}
	res, err := renewBatchScript.Run(ctx, runner, keys, args...).Int64Slice()
	if err != nil {
		return nil, m.fail(ctx, "renew", err)
	}
	if len(res) != len(partitions) {
		return nil, fmt.Errorf("redislease: renew of %d leases got %d results", len(partitions), len(res))
	}
	results := make([]error, len(partitions))
	for i, n := range res {
		results[i] = leaseResult(int(n), partitions[i])
	}
	if conn == nil {
		return results, nil
	}
	acked, err := conn.Wait(ctx, m.acks, m.ackTimeout).Result()
	if err != nil {
		return nil, m.fail(ctx, "renew (waiting for replicas)", err)
	}
	if int(acked) < m.acks {
		for i := range results {
			if results[i] == nil {
				results[i] = ReplicationError{Partition: partitions[i], Wanted: m.acks, Acked: int(acked)}
			}
		}
	}
	return results, nil
}

// Release deletes owner's lease on partition when owner holds it.
func (m *Manager) Release(ctx context.Context, partition int, owner string) error {
	keys := []string{m.partitions, m.leaseKey(partition)}
	n, err := releaseScript.Run(ctx, m.client, keys, partition, owner).Int()
	if err != nil {
		return m.fail(ctx, "release", err)
	}
	return leaseResult(n, partition)
}

// PublishDemand records owner's demand with an expiry computed from the
// server's clock; zero deletes the record.
func (m *Manager) PublishDemand(ctx context.Context, owner string, partitions uint32, ttl time.Duration) error {
	if partitions == 0 {
		if err := m.client.HDel(ctx, m.demand, owner).Err(); err != nil {
			return m.fail(ctx, "withdraw demand", err)
		}
		return nil
	}
	err := publishScript.Run(ctx, m.client, []string{m.demand}, owner, partitions, millis(ttl)).Err()
	if err != nil {
		return m.fail(ctx, "publish demand", err)
	}
	return nil
}

// leaseWrite runs acquireScript or renewScript and, when configured, waits
// for replicas to acknowledge the write.
func (m *Manager) leaseWrite(ctx context.Context, op string, script *redis.Script, partition int, owner string, d time.Duration) error {
	keys := []string{m.partitions, m.leaseKey(partition)}
	args := []interface{}{partition, owner, millis(d)}
	if m.acks > 0 {
		return m.leaseWriteAcked(ctx, op, script, keys, args, partition)
	}
	n, err := script.Run(ctx, m.client, keys, args...).Int()
	if err != nil {
		return m.fail(ctx, op, err)
	}
	return leaseResult(n, partition)
}

// leaseResult maps a lease script's answer to the LeaseManager's errors.
func leaseResult(n, partition int) error {
	switch n {
	case resultOK:
		return nil
	case resultMissing:
		return lease.PartitionMissingError{Partition: partition}
	case resultConflict:
		return lease.ConflictError{Partition: partition}
	}
	return fmt.Errorf("redislease: partition %d: unexpected script result %d", partition, n)
}

// fail returns the context's error unchanged when the context ended, and
// otherwise err wrapped with the operation that failed.
func (m *Manager) fail(ctx context.Context, op string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("redislease: %s on %s: %w", op, m.URL(), err)
}

// holdMillis is millis for an optional duration: zero stays zero.
func holdMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return millis(d)
}

// millis converts d to the whole milliseconds PX and PEXPIRE take, rounding
// up so that a positive duration never becomes zero.
func millis(d time.Duration) int64 {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return max(int64(ms), 1)
}
