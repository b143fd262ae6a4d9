package azureblob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/appendblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
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
	cfg *LeaseManager // the account, credential and HTTP client

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

// table is the content of the lease table: what the log folds into.
type table struct {
	partitions int
	leases     map[int]tableEntry
	demands    map[string]tableDemand
	clock      time.Time // the latest service time a record of the log vouched for
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
	m := &TableLeaseManager{cfg: NewLeaseManager(accountName, containerName), rollBytes: defaultRollBytes, io: make(chan struct{}, 1), gen: -1}
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

// logName returns the name of generation g of the log.
func logName(g int) string { return fmt.Sprintf("%s%09d", TableLogPrefix, g) }

// logClient returns the client of generation g of the log.
func (m *TableLeaseManager) logClient(g int) (*appendblob.Client, error) {
	c, err := m.cfg.containerClient()
	if err != nil {
		return nil, err
	}
	return c.NewAppendBlobClient(logName(g)), nil
}

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

// noteRawTime records the Date header of resp, when it has one.
func (m *TableLeaseManager) noteRawTime(resp *http.Response, sent time.Time) {
	if resp == nil {
		return
	}
	if d, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
		m.noteTime(&d, sent)
	}
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

// startAt sets the position to the beginning of generation g, nothing of
// it read.
func (m *TableLeaseManager) startAt(g int) {
	m.gen, m.id, m.offset, m.etag, m.state, m.sealed = g, "", 0, "", nil, false
	clear(m.released)
}

// blobIsSealed is the error code of a write to a sealed blob.
const blobIsSealed = bloberror.Code("BlobIsSealed")

// locate finds the latest generation of the log; ok is false when there is
// none (or no container).
func (m *TableLeaseManager) locate(ctx context.Context) (g int, ok bool, err error) {
	c, err := m.cfg.containerClient()
	if err != nil {
		return 0, false, err
	}
	prefix := TableLogPrefix
	pager := c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix})
	g = -1
	for pager.More() {
		sent := time.Now()
		var raw *http.Response
		page, err := pager.NextPage(policy.WithCaptureResponse(ctx, &raw))
		m.noteRawTime(raw, sent)
		if err != nil {
			if ctx.Err() != nil {
				return 0, false, ctx.Err()
			}
			if bloberror.HasCode(err, bloberror.ContainerNotFound, bloberror.ContainerBeingDeleted) {
				return 0, false, nil
			}
			return 0, false, fmt.Errorf("batcher: azure list the lease log in %s: %w", RedactURL(c.URL()), sdkError(err))
		}
		for _, item := range page.Segment.BlobItems {
			if item.Name == nil {
				continue
			}
			var n int
			if _, err := fmt.Sscanf(strings.TrimPrefix(*item.Name, TableLogPrefix), "%d", &n); err == nil && n > g {
				g = n
			}
		}
	}
	return g, g >= 0, nil
}

// readStatus is what one read of the log found.
type readStatus int

const (
	readOK    readStatus = iota // read to the end of the generation
	readGone                    // the generation's blob (or container) is gone
	readReset                   // the blob is not the one read before: read it again from the start
	readEmpty                   // the generation has no first record yet
)

// readMore reads what was appended to the current generation since the
// last read, in one conditional Get Blob, and folds it into the state.
func (m *TableLeaseManager) readMore(ctx context.Context) (readStatus, error) {
	b, err := m.logClient(m.gen)
	if err != nil {
		return 0, err
	}
	opts := &blob.DownloadStreamOptions{}
	from := m.offset
	if from > 0 {
		// Read from the last byte already read, the newline that ends the
		// last record: the range is never past the end of the same blob,
		// and a blob written anew shows itself there.
		from--
		opts.Range = blob.HTTPRange{Offset: from}
	}
	if m.etag != "" {
		etag := m.etag
		opts.AccessConditions = &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: &etag}}
	}
	sent := time.Now()
	var raw *http.Response
	resp, err := b.DownloadStream(policy.WithCaptureResponse(ctx, &raw), opts)
	m.noteRawTime(raw, sent)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return 0, ctx.Err()
		case bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound, bloberror.ContainerBeingDeleted):
			return readGone, nil
		case bloberror.HasCode(err, bloberror.InvalidRange):
			return readReset, nil
		}
		return 0, fmt.Errorf("batcher: azure read the lease log in %s: %w", RedactURL(m.cfgURL()), sdkError(err))
	}
	if raw != nil && raw.StatusCode == http.StatusNotModified {
		if raw.Header.Get("Date") == "" {
			return 0, m.noDate()
		}
		return readOK, nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, fmt.Errorf("batcher: azure read the lease log in %s: %w", RedactURL(m.cfgURL()), sdkError(err))
	}
	m.received.Add(uint64(len(body)))
	if resp.Date == nil {
		return 0, m.noDate()
	}
	if m.offset > 0 {
		if len(body) == 0 || body[0] != '\n' {
			return readReset, nil
		}
		body = body[1:]
	} else if len(body) == 0 {
		return readEmpty, nil
	}
	m.sealed = resp.IsSealed != nil && *resp.IsSealed
	// Whatever this manager appended before this read is in it.
	clear(m.released)
	if st, err := m.fold(body); st != readOK || err != nil {
		return st, err
	}
	if resp.ETag != nil {
		m.etag = *resp.ETag
	}
	return readOK, nil
}

// noDate is the error of a response with no Date header.
func (m *TableLeaseManager) noDate() error {
	return fmt.Errorf("batcher: azure lease log in %s: the service sent no Date header to time leases by", RedactURL(m.cfgURL()))
}

// fold applies the records in body, which starts at the current offset,
// to the state, recording the outcomes of the record whose key is m.want.
func (m *TableLeaseManager) fold(body []byte) (readStatus, error) {
	for len(body) > 0 {
		line, rest, found := bytes.Cut(body, []byte{'\n'})
		if !found {
			return 0, m.damaged(fmt.Errorf("a record at offset %d has no end", m.offset))
		}
		rec, err := decodeRecord(line)
		if err != nil {
			return 0, m.damaged(fmt.Errorf("record at offset %d: %w", m.offset, err))
		}
		switch {
		case m.offset == 0:
			if rec.Op != opCheckpoint {
				return 0, m.damaged(errors.New("the first record is not a table"))
			}
			t, err := decodeTable(rec.Table)
			if err != nil {
				return 0, m.damaged(fmt.Errorf("the first record: %w", err))
			}
			if rec.Lo != 0 {
				t.clock = time.UnixMilli(rec.Lo)
			}
			m.state, m.id, m.pending = t, rec.Gen, nil
		case rec.Gen != m.id:
			// A record of another generation's id: the blob was written
			// anew since the last read.
			return readReset, nil
		case rec.Op == opCheckpoint:
			return 0, m.damaged(fmt.Errorf("a table record at offset %d", m.offset))
		default:
			before := m.state.partitions
			res := m.state.apply(rec)
			if rec.Op == opPartitions {
				res = []error{partitionsBefore(before)}
			}
			if m.want != "" && rec.Key == m.want && !m.found {
				m.results, m.found = res, true
			}
		}
		m.offset += int64(len(line)) + 1
		body = rest
	}
	return readOK, nil
}

// damaged wraps what is wrong with the log in a TableError.
func (m *TableLeaseManager) damaged(err error) error {
	return TableError{Container: m.cfg.containerName, Generation: m.gen, Err: err}
}

// refresh brings the state up to the end of the log, following it from a
// sealed generation to the next, finding it anew when its blob is gone and
// writing the first record of a generation that has none. A state of nil
// afterwards means there is no log.
func (m *TableLeaseManager) refresh(ctx context.Context) error {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if m.gen < 0 {
			g, ok, err := m.locate(ctx)
			if err != nil {
				return err
			}
			if !ok {
				m.state, m.pending = nil, nil
				return nil
			}
			m.startAt(g)
			m.pending = nil
		}
		st, err := m.readMore(ctx)
		if err != nil {
			return err
		}
		switch st {
		case readOK:
			if !m.sealed {
				return nil
			}
			// The generation is complete: the next one starts from this
			// table.
			m.pending = m.state
			m.startAt(m.gen + 1)
		case readGone:
			if m.pending != nil {
				// The generation after a sealed one is not there: not
				// begun yet, or begun, sealed and deleted while this
				// manager was away. Only when no later one exists is it
				// this manager's to begin; beginning a deleted one anew
				// would fork the log.
				latest, ok, err := m.locate(ctx)
				if err != nil {
					return err
				}
				switch {
				case ok && latest == m.gen-1:
					err := m.begin(ctx, m.gen, m.pending)
					if err == nil {
						continue
					}
					if !errors.Is(err, errContainerGone) {
						return err
					}
				case ok && latest >= m.gen:
					// Begun since, or this manager is behind: go on from
					// the latest, as a new reader would.
					m.startAt(latest)
					m.pending = nil
					continue
				}
			}
			m.gen, m.pending = -1, nil
		case readReset:
			m.startAt(m.gen)
		case readEmpty:
			switch {
			case m.pending != nil || m.gen == 0:
				t := m.pending
				if t == nil {
					t = newTable()
				}
				switch err := m.begin(ctx, m.gen, t); {
				case errors.Is(err, errContainerGone):
					m.gen, m.pending = -1, nil
				case err != nil:
					return err
				}
			default:
				// The first record of this generation is the table the
				// one before it ends with: read that one to its end.
				if err := m.seal(ctx, m.gen-1); err != nil {
					return err
				}
				m.startAt(m.gen - 1)
			}
		}
	}
	return fmt.Errorf("batcher: azure lease log in %s moved under %d reads in a row", RedactURL(m.cfgURL()), maxAttempts)
}

// begin makes generation g exist with t as its first record, unless another
// instance did first; then, when it wrote that record, it deletes the
// generation before the sealed one, which no instance needs any more.
func (m *TableLeaseManager) begin(ctx context.Context, g int, t *table) error {
	b, err := m.logClient(g)
	if err != nil {
		return err
	}
	any := azcore.ETagAny
	sent := time.Now()
	resp, err := b.Create(ctx, &appendblob.CreateOptions{AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: &any}}})
	switch {
	case err == nil:
		m.noteTime(resp.Date, sent)
	case ctx.Err() != nil:
		return ctx.Err()
	case bloberror.HasCode(err, bloberror.BlobAlreadyExists):
	case bloberror.HasCode(err, bloberror.ContainerNotFound, bloberror.ContainerBeingDeleted):
		return errContainerGone
	default:
		return fmt.Errorf("batcher: azure begin the lease log in %s: %w", RedactURL(m.cfgURL()), sdkError(err))
	}
	t = t.clone()
	t.sweep(t.clock)
	doc, err := t.encode()
	if err != nil {
		return m.damaged(err)
	}
	rec := &logRecord{Gen: newGenerationID(), Op: opCheckpoint, Table: doc}
	if !t.clock.IsZero() {
		rec.Lo = t.clock.UnixMilli()
	}
	line, err := encodeRecord(rec)
	if err != nil {
		return m.damaged(err)
	}
	zero := int64(0)
	sent = time.Now()
	aresp, err := b.AppendBlock(ctx, streaming.NopCloser(bytes.NewReader(line)), &appendblob.AppendBlockOptions{
		AppendPositionAccessConditions: &appendblob.AppendPositionAccessConditions{AppendPosition: &zero},
	})
	switch {
	case err == nil:
		m.noteTime(aresp.Date, sent)
		if g >= 2 {
			if old, err := m.logClient(g - 2); err == nil {
				_, _ = old.Delete(ctx, nil)
			}
		}
	case ctx.Err() != nil:
		return ctx.Err()
	case bloberror.HasCode(err, bloberror.AppendPositionConditionNotMet, bloberror.BlobNotFound):
		// Another instance wrote it first (or the blob went away: the
		// next read finds out).
	default:
		return fmt.Errorf("batcher: azure begin the lease log in %s: %w", RedactURL(m.cfgURL()), sdkError(err))
	}
	return nil
}

// errContainerGone reports that the container went away under begin.
var errContainerGone = errors.New("the container is gone")

// seal seals generation g, so that nothing more is appended to it.
func (m *TableLeaseManager) seal(ctx context.Context, g int) error {
	b, err := m.logClient(g)
	if err != nil {
		return err
	}
	sent := time.Now()
	resp, err := b.Seal(ctx, nil)
	switch {
	case err == nil:
		m.noteTime(resp.Date, sent)
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound):
		return nil // the next read finds out
	}
	return fmt.Errorf("batcher: azure seal the lease log in %s: %w", RedactURL(m.cfgURL()), sdkError(err))
}

// errNoLog reports that there is no log to write a change to.
var errNoLog = errors.New("no lease log")

// commit appends one record, filled in by fill with the bounds of the
// service's time now, and returns its outcomes as the log's fold judged
// them. It returns errNoLog when there is no log.
func (m *TableLeaseManager) commit(ctx context.Context, fill func(rec *logRecord, lo time.Time, now time.Time)) ([]error, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := m.lock(ctx); err != nil {
		return nil, err
	}
	defer m.unlock()
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if m.state == nil {
			if err := m.refresh(ctx); err != nil {
				return nil, err
			}
			if m.state == nil {
				return nil, errNoLog
			}
		}
		now := time.Now()
		lo, _, _ := m.serviceTime(now)
		rec := &logRecord{Gen: m.id, Key: newRecordKey(), Lo: lo.UnixMilli()}
		fill(rec, lo, now)
		line, err := encodeRecord(rec)
		if err != nil {
			return nil, m.damaged(err)
		}
		b, err := m.logClient(m.gen)
		if err != nil {
			return nil, err
		}
		sent := time.Now()
		resp, err := b.AppendBlock(ctx, streaming.NopCloser(bytes.NewReader(line)), nil)
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return nil, ctx.Err()
			case bloberror.HasCode(err, blobIsSealed):
				// Read the sealed generation to its end and go on in the
				// next one.
				if err := m.refresh(ctx); err != nil {
					return nil, err
				}
				continue
			case bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound, bloberror.ContainerBeingDeleted):
				m.gen, m.state = -1, nil
				continue
			}
			return nil, fmt.Errorf("batcher: azure append to the lease log in %s: %w", RedactURL(m.cfgURL()), sdkError(err))
		}
		m.noteTime(resp.Date, sent)
		// A demand cannot be refused: it has no outcome to learn, and the
		// next read folds it in its place.
		results, proven := m.prove(rec)
		if !proven && rec.Op != opDemand {
			// Learn the outcome from the log: read what was appended
			// since the last read, through this record, and fold it. The
			// record is found by its key, not by the offset the service
			// answered with, which Azurite may report from before
			// appends that landed concurrently.
			m.want, m.found, m.results = rec.Key, false, nil
			st, err := m.readMore(ctx)
			m.want = ""
			if err != nil {
				return nil, err
			}
			if st != readOK || !m.found {
				m.gen, m.state = -1, nil
				return nil, fmt.Errorf("batcher: azure lease log in %s: the change appended was not found in the log after it", RedactURL(m.cfgURL()))
			}
			results = m.results
		}
		if m.offset >= m.rollBytes && !m.sealed {
			// The generation is long enough: seal it and begin the next.
			// Best effort: the outcome is known, and another instance
			// seals it when this one cannot.
			if m.seal(ctx, m.gen) == nil {
				_ = m.refresh(ctx)
			}
		}
		return results, nil
	}
	return nil, fmt.Errorf("batcher: azure lease log in %s moved under %d appends in a row", RedactURL(m.cfgURL()), maxAttempts)
}

// prove returns the outcomes of rec, just appended, when the table as last
// read decides them whatever was appended since: a renewal, release or
// acquisition of a partition whose lease owner holds until past the
// service's time now succeeds, since no other owner can take it before
// then, and a renewal or release of a partition owner does not hold is
// refused, since only owner's own changes, which this manager read back,
// could have given it to owner. A release answered so is remembered until
// the next read folds it. Anything else is not proven: the log is read.
func (m *TableLeaseManager) prove(rec *logRecord) ([]error, bool) {
	if rec.Op != opAcquire && rec.Op != opRenew && rec.Op != opRelease {
		return nil, false
	}
	_, hi, ok := m.serviceTime(time.Now())
	if !ok {
		return nil, false
	}
	results := make([]error, len(rec.Partitions))
	for i, p := range rec.Partitions {
		if p < 0 || p >= m.state.partitions {
			return nil, false // the count may have grown since
		}
		e, held := m.state.leases[p]
		mine := held && e.owner == rec.Owner && !m.released[p]
		switch {
		case mine && e.end.After(hi):
		case rec.Op != opAcquire && !mine && (!held || e.owner != rec.Owner):
			results[i] = lease.ConflictError{Partition: p}
		default:
			return nil, false
		}
	}
	if rec.Op == opRelease {
		if m.released == nil {
			m.released = map[int]bool{}
		}
		for i, p := range rec.Partitions {
			if results[i] == nil {
				m.released[p] = true
			}
		}
	}
	return results, true
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
	c, err := m.cfg.containerClient()
	if err != nil {
		return "", err
	}
	event, err := m.cfg.createContainer(ctx, c)
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

// apply folds one change into t and returns the outcome for each of its
// partitions (nil for a change without partitions).
func (t *table) apply(rec *logRecord) []error {
	lo := time.UnixMilli(rec.Lo)
	if lo.After(t.clock) {
		t.clock = lo
	}
	end := time.Unix(rec.End, 0)
	switch rec.Op {
	case opPartitions:
		t.partitions = max(t.partitions, int(rec.N))
		return nil
	case opDemand:
		if rec.N <= 0 {
			delete(t.demands, rec.Owner)
		} else {
			t.demands[rec.Owner] = tableDemand{partitions: uint32(rec.N), end: end}
		}
		return nil
	}
	results := make([]error, len(rec.Partitions))
	for i, p := range rec.Partitions {
		if p < 0 || p >= t.partitions {
			results[i] = lease.PartitionMissingError{Partition: p}
			continue
		}
		e, ok := t.leases[p]
		switch rec.Op {
		case opAcquire:
			if ok && e.owner != rec.Owner && e.end.After(lo) {
				results[i] = lease.ConflictError{Partition: p}
				continue
			}
			t.leases[p] = tableEntry{owner: rec.Owner, end: end}
		case opRenew:
			if !ok || e.owner != rec.Owner {
				results[i] = lease.ConflictError{Partition: p}
				continue
			}
			t.leases[p] = tableEntry{owner: rec.Owner, end: end}
		case opRelease:
			if !ok || e.owner != rec.Owner {
				results[i] = lease.ConflictError{Partition: p}
				continue
			}
			delete(t.leases, p)
		}
	}
	return results
}

// newTable returns an empty table.
func newTable() *table {
	return &table{leases: map[int]tableEntry{}, demands: map[string]tableDemand{}}
}

// clone returns a deep copy of t.
func (t *table) clone() *table {
	return &table{partitions: t.partitions, leases: maps.Clone(t.leases), demands: maps.Clone(t.demands), clock: t.clock}
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
