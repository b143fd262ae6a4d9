package azureblob

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/costwise/batcher/lease"
)

// TableLogPrefix begins the names of the blobs that hold the lease table of
// a TableLeaseManager in its container: append blobs named
// lease-log-000000000, lease-log-000000001 and so on, one generation of the
// table's log each.
const TableLogPrefix = "lease-log-"

// TableLeaseManager is a lease.Manager that keeps a whole shared capacity
// in a log of changes in an Azure Blob Storage container: the number of
// partitions, who holds which partition until when, and the demand of every
// instance. Every change (acquiring, renewing or releasing any number of
// partitions, publishing a demand) is one Append Block to the log's
// current blob, which never conflicts with another instance's change: the
// storage service orders the appends, and every instance reading the log
// judges each change against the table as the changes before it left it,
// so all instances agree on who won a partition. The writer learns its own
// outcome from the same fold, reading what was appended since its last
// read through its change (a second request), unless the table it read
// last decides the outcome whatever came since: renewing or releasing
// leases it holds well before they end, the common case, is one request,
// as is a demand, which nobody can refuse. Reading the table is one conditional Get Blob of the bytes
// appended since the last read (an unchanged log answers 304, no body).
//
// So an instance's storage calls do not grow with the partitions it holds
// (it is a lease.BatchAcquirer, lease.BatchRenewer and
// lease.BatchReleaser) nor with the instances sharing the container, and
// many writers do not contend, where LeaseManager lists a blob per
// partition and per instance and renews each lease with a call of its own.
// Use it when instances hold many partitions each, or when many instances
// share a container; see sharing/SIZING.md. Its layout is its own: every
// instance sharing a container must use the same kind of manager.
//
// Every instance's requests go to one blob, the current generation: Azure
// targets up to 500 requests a second per blob, and a settled instance
// makes about 1.6 a second, which SIZING.md turns into a bound on the
// instances sharing one container (about 300).
//
// The log is kept short: once a generation passes 256 KiB, the instance that
// sees it seals the blob (no append lands after that), and the first
// instance to read the sealed blob to its end writes the table it folded
// as the first record of the next generation, then deletes the generation
// before the sealed one. A new instance reads the current generation once,
// from its first record.
//
// Times in the table are the storage service's: a lease or demand record
// ends at a second of the service's clock, which each instance bounds from
// the Date headers of the responses it gets (one-second resolution) and the
// time that passed on its own monotonic clock since. A change carries the
// writer's lower bound of the service's time when it sent it: an acquire
// wins a partition only when that bound has passed the end of the lease
// before it. An entry is written to end no earlier than the service's time
// when the request was sent plus its duration, and judged ended only when a
// response's Date has passed it, so instance clocks never enter and a lease
// lasts at least as long as its holder counts on it (at most about two
// seconds more).
//
// Configure it with the With* methods before its first use; it is safe for
// concurrent use.
type TableLeaseManager struct {
	acct *account // the storage account, its credential and client

	requests atomic.Uint64 // HTTP requests sent, retries included
	failures atomic.Uint64 // of those, the ones that failed or were refused
	received atomic.Uint64 // response body bytes of log reads

	rollBytes int64 // a generation past this size is sealed

	// io lets one storage exchange at a time use the log position below.
	io chan struct{}

	// The log as read, guarded by io.
	gen      int          // the generation read; -1 when not located
	id       string       // its id, from its first record
	offset   int64        // its bytes folded into state
	etag     azcore.ETag  // its ETag when read or appended to last
	state    *table       // the table as of offset; nil when there is no log
	sealed   bool         // the generation was sealed when read last
	pending  *table       // the sealed table the generation gen starts from
	released map[int]bool // partitions released unread since the last read

	want    string  // the key of this manager's record being looked for
	found   bool    // whether it was folded
	results []error // its outcomes

	mu   sync.Mutex // guards the service clock below
	date time.Time  // the Date of the latest response
	sent time.Time  // when the request of that response was sent
	recv time.Time  // when that response arrived
}

const (
	// defaultRollBytes is the size past which a generation of the log is
	// sealed and the next one begun.
	defaultRollBytes = 256 << 10
	// staleEntryAge is how long past its end an entry stays in the table
	// before a checkpoint drops it.
	staleEntryAge = time.Minute
	// maxAttempts bounds the tries of one change or read when the log moves
	// under it (sealed, or gone and found again).
	maxAttempts = 8
)

// NewTableLeaseManager returns a lease table manager for container
// containerName of storage account accountName (endpoint
// https://<account>.blob.core.windows.net unless WithServiceURL or
// WithConnectionString says otherwise). It needs a credential:
// WithMasterKey, WithCredential or WithConnectionString.
func NewTableLeaseManager(accountName, containerName string) *TableLeaseManager {
	m := &TableLeaseManager{acct: newAccount(accountName, containerName), rollBytes: defaultRollBytes, io: make(chan struct{}, 1), gen: -1}
	m.acct.httpClient.Transport = &countingTransport{base: m.acct.httpClient.Transport, requests: &m.requests, failures: &m.failures}
	return m
}

// WithMasterKey authenticates with the storage account's shared key.
func (m *TableLeaseManager) WithMasterKey(key string) *TableLeaseManager {
	m.acct.set(func(a *account) { a.masterKey = key })
	return m
}

// WithCredential authenticates with Microsoft Entra ID (see
// LeaseManager.WithCredential).
func (m *TableLeaseManager) WithCredential(cred azcore.TokenCredential) *TableLeaseManager {
	m.acct.set(func(a *account) { a.credential = cred })
	return m
}

// WithConnectionString takes the endpoint and credential from a storage
// connection string (see LeaseManager.WithConnectionString).
func (m *TableLeaseManager) WithConnectionString(connString string) *TableLeaseManager {
	m.acct.set(func(a *account) { a.connString = connString })
	return m
}

// WithServiceURL sets the blob service endpoint (see
// LeaseManager.WithServiceURL).
func (m *TableLeaseManager) WithServiceURL(serviceURL string) *TableLeaseManager {
	m.acct.set(func(a *account) { a.serviceURL = serviceURL })
	return m
}

// CloseIdleConnections closes the manager's idle HTTP connections.
func (m *TableLeaseManager) CloseIdleConnections() { m.acct.closeIdleConnections() }

// ContainerName returns the name of the container the table is in.
func (m *TableLeaseManager) ContainerName() string { return m.acct.container }

// Requests returns the HTTP requests this manager sent to the storage
// service, retries included, and how many of them failed or were refused.
// One lease.Manager call is one request or more.
func (m *TableLeaseManager) Requests() (sent, failed uint64) {
	return m.requests.Load(), m.failures.Load()
}

// countingTransport counts the requests that pass through it.
type countingTransport struct {
	base               http.RoundTripper
	requests, failures *atomic.Uint64
}

// RoundTrip sends req and counts it, and its failure when the service
// refuses it or it does not get an answer.
func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.requests.Add(1)
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.StatusCode >= 400 {
		t.failures.Add(1)
	}
	return resp, err
}

// CloseIdleConnections closes the idle connections of the transport under
// it.
func (t *countingTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// BytesRead returns the bytes of the log this manager read: its first read
// of the current generation, then what was appended since each read.
func (m *TableLeaseManager) BytesRead() uint64 { return m.received.Load() }

// lock takes the log position for one exchange, or gives up when ctx ends.
func (m *TableLeaseManager) lock(ctx context.Context) error {
	select {
	case m.io <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// unlock gives the log position back.
func (m *TableLeaseManager) unlock() { <-m.io }

// cfgURL returns the container's URL, for messages.
func (m *TableLeaseManager) cfgURL() string {
	c, err := m.acct.containerClient()
	if err != nil {
		return m.acct.container
	}
	return c.URL()
}

// damaged wraps what is wrong with the log in a TableError.
func (m *TableLeaseManager) damaged(err error) error {
	return TableError{Container: m.acct.container, Generation: m.gen, Err: err}
}

// Snapshot reads what was appended to the log since the last read, in one
// conditional Get Blob: partitions below the table's count are leased while
// an entry's end has not passed the response's Date, the others missing; a
// missing log or container reads as every partition missing and no demand.
func (m *TableLeaseManager) Snapshot(ctx context.Context, count int) (lease.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return lease.Snapshot{}, err
	}
	if err := m.lock(ctx); err != nil {
		return lease.Snapshot{}, err
	}
	defer m.unlock()
	if err := m.refresh(ctx); err != nil {
		return lease.Snapshot{}, err
	}
	now := m.latestDate()
	snap := lease.Snapshot{Partitions: make([]lease.PartitionState, count), Demands: map[string]uint32{}}
	t := m.state
	if t == nil {
		return snap, nil
	}
	for i := range snap.Partitions {
		switch e, ok := t.leases[i]; {
		case i >= t.partitions:
			snap.Partitions[i] = lease.PartitionMissing
		case ok && e.end.After(now):
			snap.Partitions[i] = lease.PartitionLeased
		default:
			snap.Partitions[i] = lease.PartitionFree
		}
	}
	for o, d := range t.demands {
		if d.end.After(now) {
			snap.Demands[o] = d.partitions
		}
	}
	return snap, nil
}

// bootstrap creates the container unless it exists and the first generation
// of the log unless it exists, and returns the container's event.
func (m *TableLeaseManager) bootstrap(ctx context.Context) (string, error) {
	c, err := m.acct.containerClient()
	if err != nil {
		return "", err
	}
	event, err := createContainer(ctx, c)
	if err != nil {
		return "", err
	}
	if err := m.lock(ctx); err != nil {
		return "", err
	}
	defer m.unlock()
	if err := m.refresh(ctx); err != nil {
		return "", err
	}
	if m.state == nil {
		if err := m.begin(ctx, 0, newTable()); err != nil && !errors.Is(err, errContainerGone) {
			return "", err
		}
		m.gen = -1
		if err := m.refresh(ctx); err != nil {
			return "", err
		}
	}
	return event, nil
}

// Provision creates the container unless it exists, then the log unless it
// exists, or raises its partition count to count. It reports the
// container, then each partition: created when the table did not count it
// before, verified when it did.
func (m *TableLeaseManager) Provision(ctx context.Context, count int, report func(event string, val int, msg string)) error {
	if report == nil {
		report = func(string, int, string) {}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	event, err := m.bootstrap(ctx)
	if err != nil {
		return err
	}
	report(event, 0, RedactURL(m.cfgURL()))
	before := -1
	for attempt := 0; attempt < maxAttempts && before < 0; attempt++ {
		if before, err = m.partitionCount(ctx); err != nil {
			return err
		}
		if before >= count {
			break
		}
		var res []error
		res, err = m.commit(ctx, func(rec *logRecord, _, _ time.Time) {
			rec.Op, rec.N = opPartitions, int64(count)
		})
		if err == nil {
			// The count the log held just before this change: of
			// concurrent Provisions, only the first reports the
			// partitions created.
			var pb partitionsBefore
			if len(res) != 1 || !errors.As(res[0], &pb) {
				return fmt.Errorf("batcher: azure lease log in %s: no partition count before the change", RedactURL(m.cfgURL()))
			}
			before = int(pb)
		}
		if errors.Is(err, errNoLog) {
			before = -1
			if _, err = m.bootstrap(ctx); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
	}
	if before < 0 {
		return fmt.Errorf("batcher: azure lease log in %s went away %d times while provisioned", RedactURL(m.cfgURL()), maxAttempts)
	}
	for i := 0; i < count; i++ {
		if i < before {
			report(lease.VerifiedBlobEvent, i, "")
		} else {
			report(lease.CreatedBlobEvent, i, "")
		}
	}
	return nil
}

// partitionsBefore carries, as the outcome of a partition count change, the
// count the log held just before it. It is never returned to a caller.
type partitionsBefore int

func (p partitionsBefore) Error() string { return fmt.Sprintf("%d partitions before", int(p)) }

// partitionCount reads the log to its end and returns the table's partition
// count, or -1 when there is no log.
func (m *TableLeaseManager) partitionCount(ctx context.Context) (int, error) {
	if err := m.lock(ctx); err != nil {
		return 0, err
	}
	defer m.unlock()
	if err := m.refresh(ctx); err != nil {
		return 0, err
	}
	if m.state == nil {
		return -1, nil
	}
	return m.state.partitions, nil
}

// Acquire takes the lease on partition for owner for d; one that owner
// holds already is extended.
func (m *TableLeaseManager) Acquire(ctx context.Context, partition int, owner string, d time.Duration) error {
	return only(m.AcquireBatch(ctx, []int{partition}, owner, d))
}

// only returns the one result of a batch of one partition, or the batch's
// error.
func only(results []error, err error) error {
	if err != nil {
		return err
	}
	return results[0]
}

// AcquireBatch takes the leases on partitions for owner for d in one
// append: each partition that nobody else holds is taken, or extended when
// owner holds it already.
func (m *TableLeaseManager) AcquireBatch(ctx context.Context, partitions []int, owner string, d time.Duration) ([]error, error) {
	return m.batch(ctx, opAcquire, partitions, owner, d)
}

// Renew extends owner's lease on partition to d from now. As in Azure, the
// owner of a lease that ended and that nobody took since may renew it.
func (m *TableLeaseManager) Renew(ctx context.Context, partition int, owner string, d time.Duration) error {
	return only(m.RenewBatch(ctx, []int{partition}, owner, d))
}

// RenewBatch renews owner's leases on partitions in one append.
func (m *TableLeaseManager) RenewBatch(ctx context.Context, partitions []int, owner string, d time.Duration) ([]error, error) {
	return m.batch(ctx, opRenew, partitions, owner, d)
}

// Release ends owner's lease on partition at once.
func (m *TableLeaseManager) Release(ctx context.Context, partition int, owner string) error {
	return only(m.ReleaseBatch(ctx, []int{partition}, owner))
}

// ReleaseBatch ends owner's leases on partitions in one append.
func (m *TableLeaseManager) ReleaseBatch(ctx context.Context, partitions []int, owner string) ([]error, error) {
	return m.batch(ctx, opRelease, partitions, owner, 0)
}

// batch appends one change of op on partitions for owner and returns each
// partition's outcome; with no log, every partition is missing.
func (m *TableLeaseManager) batch(ctx context.Context, op string, partitions []int, owner string, d time.Duration) ([]error, error) {
	if owner == "" {
		return nil, errors.New("batcher: azure lease owner is empty")
	}
	if d != 0 {
		if _, err := leaseSeconds(d); err != nil {
			return nil, err
		}
	}
	if len(partitions) == 0 {
		return []error{}, nil
	}
	results, err := m.commit(ctx, func(rec *logRecord, _, now time.Time) {
		rec.Op, rec.Owner, rec.Partitions = op, owner, partitions
		if d != 0 {
			rec.End = m.endAfter(now, d).Unix()
		}
	})
	if errors.Is(err, errNoLog) {
		results = make([]error, len(partitions))
		for i, p := range partitions {
			results[i] = lease.PartitionMissingError{Partition: p}
		}
		return results, nil
	}
	return results, err
}

// PublishDemand records that owner wants partitions partitions until ttl
// from now; zero removes the record. A container or log that does not
// exist yet is created, with no partitions, since a demand needs none.
func (m *TableLeaseManager) PublishDemand(ctx context.Context, owner string, partitions uint32, ttl time.Duration) error {
	if owner == "" {
		return errors.New("batcher: azure demand owner is empty")
	}
	if partitions > 0 && ttl <= 0 {
		return fmt.Errorf("batcher: azure demand ttl %v is not positive", ttl)
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		_, err := m.commit(ctx, func(rec *logRecord, _, now time.Time) {
			rec.Op, rec.Owner, rec.N = opDemand, owner, int64(partitions)
			if partitions > 0 {
				rec.End = m.endAfter(now, ttl).Unix()
			}
		})
		if !errors.Is(err, errNoLog) {
			return err
		}
		if partitions == 0 {
			return nil // no log, no record to withdraw
		}
		if _, err := m.bootstrap(ctx); err != nil {
			return err
		}
	}
	return fmt.Errorf("batcher: azure lease log in %s went away %d times while a demand was published", RedactURL(m.cfgURL()), maxAttempts)
}

// TableError is returned when the lease log holds something this manager
// cannot read (written by something else, or damaged).
type TableError struct {
	Container  string
	Generation int
	Err        error
}

func (e TableError) Error() string {
	return fmt.Sprintf("batcher: azure lease log %s/%s cannot be read: %v", e.Container, logName(e.Generation), e.Err)
}

// Unwrap returns what was wrong with the log.
func (e TableError) Unwrap() error { return e.Err }
