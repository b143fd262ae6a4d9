package redislease

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ReplicationError is returned by Acquire and Renew of a Manager made with
// WithReplicaAcks when fewer replicas than asked acknowledged the lease write
// before the timeout. The caller must not count the partition on the strength
// of that write: a failover now could promote a replica that never saw it.
type ReplicationError struct {
	Partition int
	Wanted    int
	Acked     int
}

func (e ReplicationError) Error() string {
	return fmt.Sprintf("redislease: partition %d: %d of the %d replicas asked for acknowledged the lease write in time",
		e.Partition, e.Acked, e.Wanted)
}

// leaseWriteAcked runs a lease script and then WAIT on the same connection:
// WAIT counts the replicas that caught up with the writes of its own
// connection, so both commands must share one. In a cluster that connection
// goes to the primary of the resource's slot.
func (m *Manager) leaseWriteAcked(ctx context.Context, op string, script *redis.Script, keys []string, args []interface{}, partition int) error {
	node, err := m.primaryFor(ctx, keys[0])
	if err != nil {
		return m.fail(ctx, op, err)
	}
	conn := node.Conn()
	defer conn.Close()
	n, err := script.Run(ctx, conn, keys, args...).Int()
	if err != nil {
		return m.fail(ctx, op, err)
	}
	if err := leaseResult(n, partition); err != nil {
		return err
	}
	acked, err := conn.Wait(ctx, m.acks, m.ackTimeout).Result()
	if err != nil {
		return m.fail(ctx, op+" (waiting for replicas)", err)
	}
	if int(acked) < m.acks {
		return ReplicationError{Partition: partition, Wanted: m.acks, Acked: int(acked)}
	}
	return nil
}

// primaryFor returns a client of the primary that holds key.
func (m *Manager) primaryFor(ctx context.Context, key string) (*redis.Client, error) {
	switch c := m.client.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	}
	return nil, fmt.Errorf("redislease: WithReplicaAcks needs a *redis.Client or a *redis.ClusterClient, not a %T", m.client)
}
