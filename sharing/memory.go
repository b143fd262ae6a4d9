package sharing

import (
	"context"
	"sync"
	"time"

	"github.com/costwise/batcher/internal/clock"
	"github.com/costwise/batcher/lease"
)

// memoryContainer is the address MemoryLeaseManager reports in its
// container events.
const memoryContainer = "memory://batcher"

// MemoryLeaseManager is a lease.Manager that keeps partitions, leases and
// demands in process memory. Several Resources given the same
// MemoryLeaseManager share their capacity exactly as separate processes
// sharing one Azure container would: leases are exclusive, expire after
// their duration unless renewed, and demand records lapse after their ttl.
//
// It follows the Azure Blob lease rules: the owner of a lease that expired
// may still renew or release it as long as no other owner has taken it
// since. It is the default store for the sample and for unit tests; time
// comes from its clock, so a fake clock drives expiry without sleeping.
// leasetest.FaultManager wraps it to inject faults. It is safe for
// concurrent use.
type MemoryLeaseManager struct {
	mu         sync.Mutex
	clock      clock.Clock
	container  bool
	partitions map[int]*memoryLease
	demands    map[string]memoryDemand
}

// memoryLease is one partition; owner is empty when it was never leased or
// was released.
type memoryLease struct {
	owner   string
	expires time.Time
}

type memoryDemand struct {
	partitions uint32
	expires    time.Time
}

// NewMemoryLeaseManager returns an empty in-process lease.Manager that uses
// the system clock.
func NewMemoryLeaseManager() *MemoryLeaseManager {
	return &MemoryLeaseManager{
		clock:      clock.Real(),
		partitions: map[int]*memoryLease{},
		demands:    map[string]memoryDemand{},
	}
}

// WithClock sets the clock that decides when leases and demands expire. Set
// it before first use; the default is the system clock.
func (m *MemoryLeaseManager) WithClock(c clock.Clock) *MemoryLeaseManager {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c != nil {
		m.clock = c
	}
	return m
}

// begin returns the error a call must fail with, if any. It requires m.mu.
func (m *MemoryLeaseManager) begin(ctx context.Context) error {
	return ctx.Err()
}

// Provision creates the container and partitions 0..count-1 that do not
// exist and reports each one as created or verified. Report is called after
// the lock is released.
func (m *MemoryLeaseManager) Provision(ctx context.Context, count int, report func(event string, val int, msg string)) error {
	type item struct {
		event string
		val   int
		msg   string
	}
	m.mu.Lock()
	if err := m.begin(ctx); err != nil {
		m.mu.Unlock()
		return err
	}
	items := make([]item, 0, count+1)
	if m.container {
		items = append(items, item{lease.VerifiedContainerEvent, 0, memoryContainer})
	} else {
		m.container = true
		items = append(items, item{lease.CreatedContainerEvent, 0, memoryContainer})
	}
	for i := 0; i < count; i++ {
		if _, ok := m.partitions[i]; ok {
			items = append(items, item{lease.VerifiedBlobEvent, i, ""})
			continue
		}
		m.partitions[i] = &memoryLease{}
		items = append(items, item{lease.CreatedBlobEvent, i, ""})
	}
	m.mu.Unlock()
	if report != nil {
		for _, it := range items {
			report(it.event, it.val, it.msg)
		}
	}
	return nil
}

// Snapshot returns the state of partitions 0..count-1 and the live demands.
func (m *MemoryLeaseManager) Snapshot(ctx context.Context, count int) (lease.Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.begin(ctx); err != nil {
		return lease.Snapshot{}, err
	}
	now := m.clock.Now()
	snap := lease.Snapshot{Partitions: make([]lease.PartitionState, count), Demands: map[string]uint32{}}
	for i := range snap.Partitions {
		p, ok := m.partitions[i]
		switch {
		case !ok:
			snap.Partitions[i] = lease.PartitionMissing
		case p.owner != "" && now.Before(p.expires):
			snap.Partitions[i] = lease.PartitionLeased
		default:
			snap.Partitions[i] = lease.PartitionFree
		}
	}
	for owner, d := range m.demands {
		if now.Before(d.expires) {
			snap.Demands[owner] = d.partitions
		} else {
			delete(m.demands, owner)
		}
	}
	return snap, nil
}

// lease returns partition for a lease operation, or the error that the
// operation must return. It requires m.mu.
func (m *MemoryLeaseManager) lease(ctx context.Context, partition int) (*memoryLease, time.Time, error) {
	if err := m.begin(ctx); err != nil {
		return nil, time.Time{}, err
	}
	p, ok := m.partitions[partition]
	if !ok {
		return nil, time.Time{}, lease.PartitionMissingError{Partition: partition}
	}
	return p, m.clock.Now(), nil
}

// Acquire leases partition to owner for d. An owner may acquire again a
// lease it already holds, which extends it, as Azure allows.
func (m *MemoryLeaseManager) Acquire(ctx context.Context, partition int, owner string, d time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, now, err := m.lease(ctx, partition)
	if err != nil {
		return err
	}
	if p.owner != "" && p.owner != owner && now.Before(p.expires) {
		return lease.ConflictError{Partition: partition}
	}
	p.owner, p.expires = owner, now.Add(d)
	return nil
}

// Renew extends owner's lease on partition to d from now. The owner of an
// expired lease that nobody took since may renew it, as in Azure.
func (m *MemoryLeaseManager) Renew(ctx context.Context, partition int, owner string, d time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, now, err := m.lease(ctx, partition)
	if err != nil {
		return err
	}
	return p.renew(partition, owner, now.Add(d))
}

// renew extends p, which is partition, to expires when owner holds it.
// The caller holds the manager's lock.
func (p *memoryLease) renew(partition int, owner string, expires time.Time) error {
	if p.owner != owner {
		return lease.ConflictError{Partition: partition}
	}
	p.expires = expires
	return nil
}

// RenewBatch renews owner's leases on partitions, as Renew does for each,
// under one lock: a lease.BatchRenewer.
func (m *MemoryLeaseManager) RenewBatch(ctx context.Context, partitions []int, owner string, d time.Duration) ([]error, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.begin(ctx); err != nil {
		return nil, err
	}
	now := m.clock.Now()
	results := make([]error, len(partitions))
	for i, partition := range partitions {
		if p, ok := m.partitions[partition]; ok {
			results[i] = p.renew(partition, owner, now.Add(d))
		} else {
			results[i] = lease.PartitionMissingError{Partition: partition}
		}
	}
	return results, nil
}

// Release ends owner's lease on partition at once.
func (m *MemoryLeaseManager) Release(ctx context.Context, partition int, owner string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, _, err := m.lease(ctx, partition)
	if err != nil {
		return err
	}
	if p.owner != owner {
		return lease.ConflictError{Partition: partition}
	}
	p.owner, p.expires = "", time.Time{}
	return nil
}

// PublishDemand records owner's demand until ttl passes; zero withdraws it.
// Demands need no provisioning, like a record next to the partitions.
func (m *MemoryLeaseManager) PublishDemand(ctx context.Context, owner string, partitions uint32, ttl time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.begin(ctx); err != nil {
		return err
	}
	if partitions == 0 {
		delete(m.demands, owner)
		return nil
	}
	m.demands[owner] = memoryDemand{partitions: partitions, expires: m.clock.Now().Add(ttl)}
	return nil
}
