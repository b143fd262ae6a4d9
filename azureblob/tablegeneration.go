package azureblob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/appendblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
)

// logName returns the name of generation g of the log.
func logName(g int) string { return fmt.Sprintf("%s%09d", TableLogPrefix, g) }

// logClient returns the client of generation g of the log.
func (m *TableLeaseManager) logClient(g int) (*appendblob.Client, error) {
	c, err := m.acct.containerClient()
	if err != nil {
		return nil, err
	}
	return c.NewAppendBlobClient(logName(g)), nil
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
