package azureblob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

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
	c, err := m.acct.containerClient()
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
			err = m.afterGone(ctx)
		case readReset:
			m.startAt(m.gen)
		case readEmpty:
			err = m.afterEmpty(ctx)
		}
		if err != nil {
			return err
		}
	}
	return fmt.Errorf("batcher: azure lease log in %s moved under %d reads in a row", RedactURL(m.cfgURL()), maxAttempts)
}

// afterGone moves the position on when the generation being read is gone.
// After a sealed generation, the next one is not there: not begun yet, or
// begun, sealed and deleted while this manager was away. Only when no later
// one exists is it this manager's to begin; beginning a deleted one anew
// would fork the log. Otherwise the log is located anew.
func (m *TableLeaseManager) afterGone(ctx context.Context) error {
	if m.pending != nil {
		latest, ok, err := m.locate(ctx)
		if err != nil {
			return err
		}
		switch {
		case ok && latest == m.gen-1:
			err := m.begin(ctx, m.gen, m.pending)
			if err == nil {
				return nil
			}
			if !errors.Is(err, errContainerGone) {
				return err
			}
		case ok && latest >= m.gen:
			// Begun since, or this manager is behind: go on from the
			// latest, as a new reader would.
			m.startAt(latest)
			m.pending = nil
			return nil
		}
	}
	m.gen, m.pending = -1, nil
	return nil
}

// afterEmpty moves the position on when the generation being read has no
// first record yet: it writes that record (the table the sealed generation
// ended with, or an empty table for the first generation), or else reads
// the generation before to its end, whose table the first record is.
func (m *TableLeaseManager) afterEmpty(ctx context.Context) error {
	if m.pending == nil && m.gen != 0 {
		if err := m.seal(ctx, m.gen-1); err != nil {
			return err
		}
		m.startAt(m.gen - 1)
		return nil
	}
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
	return nil
}
