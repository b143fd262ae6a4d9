package azureblob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/costwise/batcher/lease"
)

// TableBlobName is the name of the blob that holds the lease table of a
// TableLeaseManager in its container.
const TableBlobName = "lease-table"

// TableLeaseManager is a lease.Manager that keeps a whole shared capacity
// in one blob of an Azure Blob Storage container: the number of partitions,
// who holds which partition until when, and the demand of every instance.
// Reading the table is one Get Blob; every change is a read-modify-write
// made exclusive by the blob's ETag (a Put Blob with If-Match), retried on a
// conflict. So an instance's storage calls do not grow with the partitions
// it holds: it acquires, renews or releases any number of them, or
// publishes its demand, in one write (it is a lease.BatchAcquirer,
// lease.BatchRenewer and lease.BatchReleaser), and reads the state of every
// partition and every demand in one small read, where LeaseManager lists a
// blob per partition and per instance and renews each lease with a call of
// its own. Use it when instances hold many partitions each, or when many
// instances share a container; see sharing/SIZING.md. Its layout is its
// own: every instance sharing a container must use the same kind of manager.
//
// Times in the table are the storage service's: a lease or demand record
// ends at a second of the service's clock, which each instance bounds from
// the Date headers of the responses it gets (one-second resolution) and the
// time that passed on its own monotonic clock since. An entry is written to
// end no earlier than the service's time when the request was sent plus its
// duration, and judged ended only when a response's Date has passed it, so
// instance clocks never enter and a lease lasts at least as long as its
// holder counts on it (at most about two seconds more).
//
// Writes from many instances to the one blob contend: each conflict costs a
// read and a write more. Azure serves up to about 500 requests a second to
// one blob; SIZING.md says how that bounds the instances and their pace.
//
// Configure it with the With* methods before its first use; it is safe for
// concurrent use.
type TableLeaseManager struct {
	cfg *LeaseManager // the account, credential and HTTP client

	requests atomic.Uint64 // HTTP requests sent, retries included
	failures atomic.Uint64 // of those, the ones that failed or were refused

	wmu sync.Mutex // one change at a time from this manager

	mu     sync.Mutex // guards everything below
	cached *table     // the table as last read or written; nil when unknown
	etag   azcore.ETag
	at     time.Time     // when cached was read or written (local clock)
	trust  time.Duration // how old a cached table may be to be written over unread
	date   time.Time     // the Date of the latest response
	sent   time.Time     // when the request of that response was sent
	recv   time.Time     // when that response arrived
}

// table is the content of the lease table blob.
type table struct {
	partitions int
	leases     map[int]tableEntry
	demands    map[string]tableDemand
}

// tableEntry is one lease: its owner and the service time it ends at.
type tableEntry struct {
	owner string
	end   time.Time
}

// tableDemand is one demand record and the service time it lapses at.
type tableDemand struct {
	partitions uint32
	end        time.Time
}

// Trust bounds of a cached table: a write goes out over a cached table
// (one request) while conflicts are rare, and reads first (two) while they
// are common.
const (
	minTrust = 10 * time.Millisecond
	maxTrust = 10 * time.Second
	// staleEntryAge is how long past its end an entry stays in the table
	// before a write drops it.
	staleEntryAge = time.Minute
)

// NewTableLeaseManager returns a lease table manager for container
// containerName of storage account accountName (endpoint
// https://<account>.blob.core.windows.net unless WithServiceURL or
// WithConnectionString says otherwise). It needs a credential:
// WithMasterKey, WithCredential or WithConnectionString.
func NewTableLeaseManager(accountName, containerName string) *TableLeaseManager {
	m := &TableLeaseManager{cfg: NewLeaseManager(accountName, containerName), trust: time.Second}
	m.cfg.httpClient.Transport = &countingTransport{base: m.cfg.httpClient.Transport, requests: &m.requests, failures: &m.failures}
	return m
}

// WithMasterKey authenticates with the storage account's shared key.
func (m *TableLeaseManager) WithMasterKey(key string) *TableLeaseManager {
	m.cfg.WithMasterKey(key)
	return m
}

// WithCredential authenticates with Microsoft Entra ID (see
// LeaseManager.WithCredential).
func (m *TableLeaseManager) WithCredential(cred azcore.TokenCredential) *TableLeaseManager {
	m.cfg.WithCredential(cred)
	return m
}

// WithConnectionString takes the endpoint and credential from a storage
// connection string (see LeaseManager.WithConnectionString).
func (m *TableLeaseManager) WithConnectionString(connString string) *TableLeaseManager {
	m.cfg.WithConnectionString(connString)
	return m
}

// WithServiceURL sets the blob service endpoint (see
// LeaseManager.WithServiceURL).
func (m *TableLeaseManager) WithServiceURL(serviceURL string) *TableLeaseManager {
	m.cfg.WithServiceURL(serviceURL)
	return m
}

// CloseIdleConnections closes the manager's idle HTTP connections.
func (m *TableLeaseManager) CloseIdleConnections() { m.cfg.CloseIdleConnections() }

// ContainerName returns the name of the container the table is in.
func (m *TableLeaseManager) ContainerName() string { return m.cfg.containerName }

// Requests returns the HTTP requests this manager sent to the storage
// service, retries included, and how many of them failed or were refused
// (a conflict on the table's ETag among them). One lease.Manager call is
// one request or more.
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

// blobClient returns the client of the table blob.
func (m *TableLeaseManager) blobClient() (*blockblob.Client, error) {
	c, err := m.cfg.containerClient()
	if err != nil {
		return nil, err
	}
	return c.NewBlockBlobClient(TableBlobName), nil
}

// noteTime records the Date of a response to a request sent at sent.
func (m *TableLeaseManager) noteTime(date *time.Time, sent time.Time) {
	if date == nil {
		return
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.date, m.sent, m.recv = *date, sent, now
}

// serviceTime returns bounds of the storage service's clock at the local
// time t: the service's time is at least lo and less than hi. Date has
// one-second resolution and was stamped between the request's sending and
// the response's arrival. ok is false before any response arrived.
func (m *TableLeaseManager) serviceTime(t time.Time) (lo, hi time.Time, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.date.IsZero() {
		return time.Time{}, time.Time{}, false
	}
	return m.date.Add(t.Sub(m.recv)), m.date.Add(serverTimeGranularity + t.Sub(m.sent)), true
}

// endAfter returns the service time, in whole seconds, at which something
// that must last d from the local time t ends: never before the service's
// time at t plus d.
func (m *TableLeaseManager) endAfter(t time.Time, d time.Duration) time.Time {
	_, hi, _ := m.serviceTime(t)
	end := hi.Add(d)
	if tr := end.Truncate(time.Second); tr.Before(end) {
		end = tr.Add(time.Second)
	}
	return end
}

// read gets the table; a missing table or container reads as nil with no
// error. It records the table and its ETag as the cached ones.
func (m *TableLeaseManager) read(ctx context.Context) (*table, azcore.ETag, time.Time, error) {
	b, err := m.blobClient()
	if err != nil {
		return nil, "", time.Time{}, err
	}
	sent := time.Now()
	resp, err := b.DownloadStream(ctx, nil)
	if err != nil {
		if ctx.Err() != nil {
			return nil, "", time.Time{}, ctx.Err()
		}
		var re *azcore.ResponseError
		if errors.As(err, &re) && re.RawResponse != nil {
			if d, perr := http.ParseTime(re.RawResponse.Header.Get("Date")); perr == nil {
				m.noteTime(&d, sent)
			}
		}
		if bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound, bloberror.ContainerBeingDeleted) {
			m.setCache(nil, "")
			return nil, "", m.latestDate(), nil
		}
		return nil, "", time.Time{}, fmt.Errorf("batcher: azure read the lease table in %s: %w", RedactURL(m.cfgURL()), sdkError(err))
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, resp.Body); err != nil {
		if ctx.Err() != nil {
			return nil, "", time.Time{}, ctx.Err()
		}
		return nil, "", time.Time{}, fmt.Errorf("batcher: azure read the lease table in %s: %w", RedactURL(m.cfgURL()), sdkError(err))
	}
	m.noteTime(resp.Date, sent)
	if resp.Date == nil {
		return nil, "", time.Time{}, fmt.Errorf("batcher: azure read the lease table in %s: the response has no Date header to judge leases by", RedactURL(m.cfgURL()))
	}
	t, err := decodeTable(buf.Bytes())
	if err != nil {
		return nil, "", time.Time{}, TableError{Container: m.cfg.containerName, Err: err}
	}
	var etag azcore.ETag
	if resp.ETag != nil {
		etag = *resp.ETag
	}
	m.setCache(t, etag)
	return t, etag, *resp.Date, nil
}

// latestDate returns the Date of the latest response.
func (m *TableLeaseManager) latestDate() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.date
}

// cfgURL returns the container's URL, for messages.
func (m *TableLeaseManager) cfgURL() string {
	c, err := m.cfg.containerClient()
	if err != nil {
		return m.cfg.containerName
	}
	return c.URL()
}

// setCache records t (nil: none) as the table at etag, read or written now.
func (m *TableLeaseManager) setCache(t *table, etag azcore.ETag) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cached, m.etag, m.at = t, etag, time.Now()
}

// cachedTable returns a copy of the cached table when it is recent enough
// to write over without reading it first.
func (m *TableLeaseManager) cachedTable() (*table, azcore.ETag, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cached == nil || time.Since(m.at) > m.trust {
		return nil, "", false
	}
	return m.cached.clone(), m.etag, true
}

// adjustTrust doubles how old a cached table may be after a write over it
// succeeded, and halves it after one was refused.
func (m *TableLeaseManager) adjustTrust(ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ok {
		m.trust = min(2*m.trust, maxTrust)
	} else {
		m.trust = max(m.trust/2, minTrust)
	}
}

// errNoChange is what a change function returns when the table needs no
// write.
var errNoChange = errors.New("no change")

// change applies fn to the current table and writes the result over it,
// conditional on its ETag: when another writer changed the table first, it
// reads it again and retries after a random wait that doubles each time, up
// to maxAttempts writes (then a ContentionError) or until ctx ends. fn gets
// a copy of the table (nil when there is none: it may create one) and the
// bounds of the service's time now; it returns errNoChange when nothing is
// to be written, and any other error to give up. fn may run several times.
func (m *TableLeaseManager) change(ctx context.Context, fn func(t *table, lo, hi time.Time) (*table, error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b, err := m.blobClient()
	if err != nil {
		return err
	}
	m.wmu.Lock()
	defer m.wmu.Unlock()
	wait := 4 * time.Millisecond
	for attempt := 1; ; attempt++ {
		t, etag, cached := m.cachedTable()
		if !cached {
			if t, etag, _, err = m.read(ctx); err != nil {
				return err
			}
			if t != nil {
				t = t.clone()
			}
		}
		// A table is only cached with the Date of the response it came
		// in, and read answers without one are refused, so the service's
		// clock is bounded here but for a missing table answered without
		// a Date.
		lo, hi, ok := m.serviceTime(time.Now())
		if !ok {
			return fmt.Errorf("batcher: azure lease table in %s: the service sent no Date header to time leases by", RedactURL(m.cfgURL()))
		}
		next, err := fn(t, lo, hi)
		if errors.Is(err, errNoChange) {
			return nil
		}
		if err != nil {
			return err
		}
		next.sweep(lo)
		err = m.write(ctx, b, next, etag)
		if cached {
			m.adjustTrust(err == nil)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, errTableMoved) {
			return err
		}
		m.setCache(nil, "")
		if attempt == maxAttempts {
			return ContentionError{Container: m.cfg.containerName, Attempts: attempt}
		}
		// Another instance wrote first: read again after a random wait
		// that doubles with each conflict, so that many writers spread out
		// instead of retrying in step.
		if err := sleepCtx(ctx, time.Duration(rand.Int64N(int64(wait))+1)); err != nil {
			return err
		}
		wait = min(2*wait, maxBackoff)
	}
}

// errTableMoved reports that the table changed since it was read.
var errTableMoved = errors.New("the lease table changed since it was read")

// write puts t over the table at etag (none: only if there is no table)
// and caches it.
func (m *TableLeaseManager) write(ctx context.Context, b *blockblob.Client, t *table, etag azcore.ETag) error {
	cond := &blob.ModifiedAccessConditions{}
	if etag == "" {
		any := azcore.ETagAny
		cond.IfNoneMatch = &any
	} else {
		cond.IfMatch = &etag
	}
	body, err := t.encode()
	if err != nil {
		return TableError{Container: m.cfg.containerName, Err: err}
	}
	sent := time.Now()
	resp, err := b.Upload(ctx, streaming.NopCloser(bytes.NewReader(body)), &blockblob.UploadOptions{
		AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: cond},
	})
	switch {
	case err == nil:
		if resp.Date != nil && resp.ETag != nil {
			m.noteTime(resp.Date, sent)
			m.setCache(t, *resp.ETag)
		} else {
			m.setCache(nil, "")
		}
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case bloberror.HasCode(err, bloberror.ConditionNotMet, bloberror.BlobAlreadyExists, bloberror.BlobNotFound):
		return errTableMoved
	case bloberror.HasCode(err, bloberror.ContainerNotFound):
		return lease.PartitionMissingError{Partition: 0}
	}
	return fmt.Errorf("batcher: azure write the lease table in %s: %w", RedactURL(m.cfgURL()), sdkError(err))
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// Snapshot reads the table in one Get Blob: partitions below the table's
// count are leased while an entry's end has not passed the response's Date,
// the others missing; a missing table or container reads as every partition
// missing and no demand.
func (m *TableLeaseManager) Snapshot(ctx context.Context, count int) (lease.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return lease.Snapshot{}, err
	}
	t, _, now, err := m.read(ctx)
	if err != nil {
		return lease.Snapshot{}, err
	}
	snap := lease.Snapshot{Partitions: make([]lease.PartitionState, count), Demands: map[string]uint32{}}
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

// Provision creates the container unless it exists, then the table unless
// it exists, or raises its partition count to count. It reports the
// container, then each partition: created when the table did not count it
// before, verified when it did.
func (m *TableLeaseManager) Provision(ctx context.Context, count int, report func(event string, val int, msg string)) error {
	if report == nil {
		report = func(string, int, string) {}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c, err := m.cfg.containerClient()
	if err != nil {
		return err
	}
	event, err := m.cfg.createContainer(ctx, c)
	if err != nil {
		return err
	}
	report(event, 0, RedactURL(c.URL()))
	before := 0
	err = m.change(ctx, func(t *table, _, _ time.Time) (*table, error) {
		if t == nil {
			t = newTable()
		}
		before = t.partitions
		if t.partitions >= count {
			return nil, errNoChange
		}
		t.partitions = count
		return t, nil
	})
	if err != nil {
		return err
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
// write: each partition that nobody else holds is taken, or extended when
// owner holds it already.
func (m *TableLeaseManager) AcquireBatch(ctx context.Context, partitions []int, owner string, d time.Duration) ([]error, error) {
	return m.batch(ctx, partitions, owner, d, func(t *table, p int, lo, end time.Time) error {
		if e, ok := t.leases[p]; ok && e.owner != owner && e.end.After(lo) {
			return lease.ConflictError{Partition: p}
		}
		t.leases[p] = tableEntry{owner: owner, end: end}
		return nil
	})
}

// Renew extends owner's lease on partition to d from now. As in Azure, the
// owner of a lease that ended and that nobody took since may renew it.
func (m *TableLeaseManager) Renew(ctx context.Context, partition int, owner string, d time.Duration) error {
	return only(m.RenewBatch(ctx, []int{partition}, owner, d))
}

// RenewBatch renews owner's leases on partitions in one write.
func (m *TableLeaseManager) RenewBatch(ctx context.Context, partitions []int, owner string, d time.Duration) ([]error, error) {
	return m.batch(ctx, partitions, owner, d, func(t *table, p int, _, end time.Time) error {
		if e, ok := t.leases[p]; !ok || e.owner != owner {
			return lease.ConflictError{Partition: p}
		}
		t.leases[p] = tableEntry{owner: owner, end: end}
		return nil
	})
}

// Release ends owner's lease on partition at once.
func (m *TableLeaseManager) Release(ctx context.Context, partition int, owner string) error {
	return only(m.ReleaseBatch(ctx, []int{partition}, owner))
}

// ReleaseBatch ends owner's leases on partitions in one write.
func (m *TableLeaseManager) ReleaseBatch(ctx context.Context, partitions []int, owner string) ([]error, error) {
	return m.batch(ctx, partitions, owner, 0, func(t *table, p int, _, _ time.Time) error {
		if e, ok := t.leases[p]; !ok || e.owner != owner {
			return lease.ConflictError{Partition: p}
		}
		delete(t.leases, p)
		return nil
	})
}

// batch applies op to each of partitions in one change of the table and
// returns each one's outcome. op gets the lower bound of the service's time
// and the end of a lease of d sent now.
func (m *TableLeaseManager) batch(ctx context.Context, partitions []int, owner string, d time.Duration, op func(t *table, p int, lo, end time.Time) error) ([]error, error) {
	if owner == "" {
		return nil, errors.New("batcher: azure lease owner is empty")
	}
	if d != 0 {
		if _, err := leaseSeconds(d); err != nil {
			return nil, err
		}
	}
	var results []error
	err := m.change(ctx, func(t *table, lo, _ time.Time) (*table, error) {
		results = make([]error, len(partitions))
		if t == nil {
			for i, p := range partitions {
				results[i] = lease.PartitionMissingError{Partition: p}
			}
			return nil, errNoChange
		}
		end := m.endAfter(time.Now(), d)
		changed := false
		for i, p := range partitions {
			if p < 0 || p >= t.partitions {
				results[i] = lease.PartitionMissingError{Partition: p}
				continue
			}
			if results[i] = op(t, p, lo, end); results[i] == nil {
				changed = true
			}
		}
		if !changed {
			return nil, errNoChange
		}
		return t, nil
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}

// PublishDemand records that owner wants partitions partitions until ttl
// from now; zero removes the record. A container that does not exist yet is
// created, and a table with no partitions, since a demand needs none.
func (m *TableLeaseManager) PublishDemand(ctx context.Context, owner string, partitions uint32, ttl time.Duration) error {
	if owner == "" {
		return errors.New("batcher: azure demand owner is empty")
	}
	if partitions > 0 && ttl <= 0 {
		return fmt.Errorf("batcher: azure demand ttl %v is not positive", ttl)
	}
	err := m.change(ctx, func(t *table, _, _ time.Time) (*table, error) {
		if t == nil {
			if partitions == 0 {
				return nil, errNoChange
			}
			t = newTable()
		}
		if partitions == 0 {
			if _, ok := t.demands[owner]; !ok {
				return nil, errNoChange
			}
			delete(t.demands, owner)
			return t, nil
		}
		t.demands[owner] = tableDemand{partitions: partitions, end: m.endAfter(time.Now(), ttl)}
		return t, nil
	})
	var missing lease.PartitionMissingError
	if errors.As(err, &missing) && partitions > 0 {
		// The container is gone: create it, then publish again.
		c, cerr := m.cfg.containerClient()
		if cerr != nil {
			return cerr
		}
		if _, cerr = m.cfg.createContainer(ctx, c); cerr != nil {
			return cerr
		}
		return m.PublishDemand(ctx, owner, partitions, ttl)
	}
	return err
}

// newTable returns an empty table.
func newTable() *table {
	return &table{leases: map[int]tableEntry{}, demands: map[string]tableDemand{}}
}

// clone returns a deep copy of t.
func (t *table) clone() *table {
	return &table{partitions: t.partitions, leases: maps.Clone(t.leases), demands: maps.Clone(t.demands)}
}

// sweep drops the entries that ended more than staleEntryAge before now.
func (t *table) sweep(now time.Time) {
	cut := now.Add(-staleEntryAge)
	for p, e := range t.leases {
		if e.end.Before(cut) {
			delete(t.leases, p)
		}
	}
	for o, d := range t.demands {
		if d.end.Before(cut) {
			delete(t.demands, o)
		}
	}
}

// maxAttempts bounds the writes of one change of the table: past it, other
// writers keep winning, and the caller's next pass (which backs off) does
// better than more requests now.
const maxAttempts = 12

// maxBackoff bounds the random wait after a conflict.
const maxBackoff = time.Second

// ContentionError is returned by a TableLeaseManager call whose change of
// the lease table lost to other writers Attempts times in a row. Nothing
// was changed; the call may be made again.
type ContentionError struct {
	Container string
	Attempts  int
}

func (e ContentionError) Error() string {
	return fmt.Sprintf("batcher: azure lease table %s/%s: other instances changed it first %d times in a row", e.Container, TableBlobName, e.Attempts)
}

// TableError is returned when the lease table blob holds something this
// manager cannot read (written by something else, or damaged).
type TableError struct {
	Container string
	Err       error
}

func (e TableError) Error() string {
	return fmt.Sprintf("batcher: azure lease table %s/%s cannot be read: %v", e.Container, TableBlobName, e.Err)
}

// Unwrap returns what was wrong with the table.
func (e TableError) Unwrap() error { return e.Err }
