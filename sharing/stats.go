package sharing

import (
	"errors"
	"sync/atomic"

	"github.com/costwise/batcher/lease"
)

// Stats is a snapshot of a Resource's state and counters, for
// health views, metrics and the benchmark tool. Counters start at zero when
// the resource is made and only grow.
type Stats struct {
	// Owner is the id the instance leases under.
	Owner string
	// Partitions is the number of partitions of the shared capacity.
	Partitions int
	// Held is the number of partitions whose lease counts as capacity now.
	Held int
	// Demand is the number of partitions the instance wants.
	Demand int
	// Share is the instance's max-min fair share as of its last snapshot.
	Share int
	// Capacity is what Capacity returns now.
	Capacity uint32
	// StorageCalls counts lease.Manager calls; StorageFailures those that
	// returned an error, lease conflicts included.
	StorageCalls, StorageFailures uint64
	// Acquisitions, Conflicts, Renewals and Releases count leases won, lost
	// races for a lease, renewals that succeeded and leases given up
	// (released, lost or expired).
	Acquisitions, Conflicts, Renewals, Releases uint64
	// Errors counts error events.
	Errors uint64
}

// sharedCounters are the atomic counters behind Stats.
type sharedCounters struct {
	calls, failures                                   atomic.Uint64
	acquisitions, conflicts, renewals, releases, errs atomic.Uint64
	demand, share                                     atomic.Int64
}

// count records one storage call that returned err, and returns err.
func (c *sharedCounters) count(err error) error {
	c.calls.Add(1)
	if err != nil {
		c.failures.Add(1)
		var conflict lease.ConflictError
		if errors.As(err, &conflict) {
			c.conflicts.Add(1)
		}
	}
	return err
}

// Stats returns a snapshot of the resource's state and counters.
func (r *Resource) Stats() Stats {
	now := r.clock.Now()
	held, capacity := r.heldAt(now)
	return Stats{
		Owner:           r.owner,
		Partitions:      r.partitionCount(),
		Held:            held,
		Demand:          int(r.stats.demand.Load()),
		Share:           int(r.stats.share.Load()),
		Capacity:        capacity + r.reserved.Load(),
		StorageCalls:    r.stats.calls.Load(),
		StorageFailures: r.stats.failures.Load(),
		Acquisitions:    r.stats.acquisitions.Load(),
		Conflicts:       r.stats.conflicts.Load(),
		Renewals:        r.stats.renewals.Load(),
		Releases:        r.stats.releases.Load(),
		Errors:          r.stats.errs.Load(),
	}
}
