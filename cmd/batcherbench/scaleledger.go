package main

import (
	"context"
	"sync"
	"time"

	"github.com/costwise/batcher/lease"
)

// ledger records what a store granted to whom, as seen through the
// lease.Manager of every instance of one namespace, so that the scale
// scenario can check from the instances' public Stats alone that none of
// them counts a partition the store does not give it: the condition
// without which two instances can never count one partition. It also
// provisions the namespace once for all instances: a hundred instances
// each verifying 500 partitions would measure start-up, not sharing. It
// is safe for concurrent use.
//
// A grant of partition p to an owner starts when its Acquire or Renew
// returns success and lasts until the request was sent + the lease
// duration (the store started the lease no earlier, so it lasts at least
// that long), until the owner asks to release it, or until another owner
// acquires p, whichever comes first. An instance counts a lease from after
// its call returned until before the request it sent + the lease duration,
// and stops counting it before it releases it; so what it counts is always
// a subset of what the ledger shows granted to it.
type ledger struct {
	provisionMu sync.Mutex
	provisioned int // partitions provisioned so far

	mu       sync.Mutex
	grants   map[int]grant
	acquires map[string]uint64 // successful acquires per owner
	doubles  int               // a store granting a partition that was granted to another
}

// grant is one owner's lease on a partition as the ledger knows it.
type grant struct {
	owner string
	until time.Time
}

func newLedger() *ledger {
	return &ledger{grants: map[int]grant{}, acquires: map[string]uint64{}}
}

// wrap returns a lease.Manager that passes every call to inner and records
// its outcome in l.
func (l *ledger) wrap(inner lease.Manager) lease.Manager {
	m := &ledgerManager{Manager: inner, l: l}
	b, ok := inner.(lease.BatchRenewer)
	if !ok {
		return m
	}
	// Keep the store's one-call renewal visible to the instance.
	bm := &ledgerBatchManager{ledgerManager: m, batch: b}
	a, ok1 := inner.(lease.BatchAcquirer)
	r, ok2 := inner.(lease.BatchReleaser)
	if ok1 && ok2 {
		// And its one-call acquisitions and releases.
		return &ledgerTableManager{ledgerBatchManager: bm, acquire: a, release: r}
	}
	return bm
}

// granted records a successful acquire (acquired) or renewal of p by owner
// for d from sent.
func (l *ledger) granted(p int, owner string, sent time.Time, d time.Duration, acquired bool) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if g, ok := l.grants[p]; ok && g.owner != owner && now.Before(g.until) {
		l.doubles++
	}
	l.grants[p] = grant{owner: owner, until: sent.Add(d)}
	if acquired {
		l.acquires[owner]++
	}
}

// released records that owner gives p up; it is called before the store
// is asked, as the instance stopped counting p before.
func (l *ledger) released(p int, owner string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if g, ok := l.grants[p]; ok && g.owner == owner {
		delete(l.grants, p)
	}
}

// holdings returns the partitions granted to each owner at now and the
// acquires each owner has made so far.
func (l *ledger) holdings(now time.Time) (granted map[string]int, acquires map[string]uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	granted = make(map[string]int, len(l.acquires))
	for _, g := range l.grants {
		if now.Before(g.until) {
			granted[g.owner]++
		}
	}
	return granted, l.acquireCounts()
}

// acquireCounts copies the acquires per owner. It requires l.mu.
func (l *ledger) acquireCounts() map[string]uint64 {
	out := make(map[string]uint64, len(l.acquires))
	for o, n := range l.acquires {
		out[o] = n
	}
	return out
}

// acquired returns the acquires each owner has made so far.
func (l *ledger) acquired() map[string]uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acquireCounts()
}

// storeDoubles returns how often the store granted a partition while the
// ledger still showed it granted to another owner.
func (l *ledger) storeDoubles() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.doubles
}

// countingViolations returns the instances (by index) that count more
// partitions than the store can have granted them: counted[i] is what
// owner[i] counted, read after before and before after were taken with
// holdings and acquired. A partition acquired between the two reads may
// be counted without showing in before, so each instance is allowed the
// acquires it made in between.
func countingViolations(owners []string, counted []int, granted map[string]int, before, after map[string]uint64) []int {
	var bad []int
	for i, o := range owners {
		if counted[i] > granted[o]+int(after[o]-before[o]) {
			bad = append(bad, i)
		}
	}
	return bad
}

// ledgerManager is one instance's view of a store, recorded in a ledger.
type ledgerManager struct {
	lease.Manager
	l *ledger
}

// Provision provisions the store on the first call for a count and
// answers later calls for no more partitions at once.
func (m *ledgerManager) Provision(ctx context.Context, count int, report func(event string, val int, msg string)) error {
	m.l.provisionMu.Lock()
	defer m.l.provisionMu.Unlock()
	if count <= m.l.provisioned {
		return nil
	}
	if err := m.Manager.Provision(ctx, count, report); err != nil {
		return err
	}
	m.l.provisioned = count
	return nil
}

// Acquire passes the call on and records a grant.
func (m *ledgerManager) Acquire(ctx context.Context, partition int, owner string, d time.Duration) error {
	sent := time.Now()
	err := m.Manager.Acquire(ctx, partition, owner, d)
	if err == nil {
		m.l.granted(partition, owner, sent, d, true)
	}
	return err
}

// Renew passes the call on and records the extended grant. A renewal that
// fails leaves the grant to run out: the instance may count the lease
// until the call returns.
func (m *ledgerManager) Renew(ctx context.Context, partition int, owner string, d time.Duration) error {
	sent := time.Now()
	err := m.Manager.Renew(ctx, partition, owner, d)
	if err == nil {
		m.l.granted(partition, owner, sent, d, false)
	}
	return err
}

// Release records the release, then passes the call on.
func (m *ledgerManager) Release(ctx context.Context, partition int, owner string) error {
	m.l.released(partition, owner)
	return m.Manager.Release(ctx, partition, owner)
}

// ledgerBatchManager is a ledgerManager over a store that renews several
// leases in one call.
type ledgerBatchManager struct {
	*ledgerManager
	batch lease.BatchRenewer
}

// RenewBatch passes the call on and records each extended grant.
func (m *ledgerBatchManager) RenewBatch(ctx context.Context, partitions []int, owner string, d time.Duration) ([]error, error) {
	sent := time.Now()
	results, err := m.batch.RenewBatch(ctx, partitions, owner, d)
	if err != nil || len(results) != len(partitions) {
		return results, err
	}
	for i, p := range partitions {
		if results[i] == nil {
			m.l.granted(p, owner, sent, d, false)
		}
	}
	return results, nil
}

// ledgerTableManager is a ledgerBatchManager over a store that also
// acquires and releases several leases in one call.
type ledgerTableManager struct {
	*ledgerBatchManager
	acquire lease.BatchAcquirer
	release lease.BatchReleaser
}

// AcquireBatch passes the call on and records each grant.
func (m *ledgerTableManager) AcquireBatch(ctx context.Context, partitions []int, owner string, d time.Duration) ([]error, error) {
	sent := time.Now()
	results, err := m.acquire.AcquireBatch(ctx, partitions, owner, d)
	if err != nil || len(results) != len(partitions) {
		return results, err
	}
	for i, p := range partitions {
		if results[i] == nil {
			m.l.granted(p, owner, sent, d, true)
		}
	}
	return results, nil
}

// ReleaseBatch records the releases, then passes the call on.
func (m *ledgerTableManager) ReleaseBatch(ctx context.Context, partitions []int, owner string) ([]error, error) {
	for _, p := range partitions {
		m.l.released(p, owner)
	}
	return m.release.ReleaseBatch(ctx, partitions, owner)
}
