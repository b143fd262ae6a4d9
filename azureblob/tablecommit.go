package azureblob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/costwise/batcher/lease"
)

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
		// next read folds it in its place. Other changes are answered from
		// the table as last read when it decides them (prove), or else
		// from the log read through the change.
		results, proven := m.prove(rec)
		if !proven && rec.Op != opDemand {
			if results, err = m.readOutcome(ctx, rec); err != nil {
				return nil, err
			}
		}
		m.rollIfLong(ctx)
		return results, nil
	}
	return nil, fmt.Errorf("batcher: azure lease log in %s moved under %d appends in a row", RedactURL(m.cfgURL()), maxAttempts)
}

// readOutcome learns the outcomes of rec, just appended, from the log: it
// reads what was appended since the last read, through rec, and folds it.
// The record is found by its key, not by the offset the service answered
// the append with, which Azurite may report from before appends that landed
// concurrently.
func (m *TableLeaseManager) readOutcome(ctx context.Context, rec *logRecord) ([]error, error) {
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
	return m.results, nil
}

// rollIfLong seals the generation once it is long enough, and begins the
// next. Best effort: the outcome of the change is known, and another
// instance seals it when this one cannot.
func (m *TableLeaseManager) rollIfLong(ctx context.Context) {
	if m.offset >= m.rollBytes && !m.sealed && m.seal(ctx, m.gen) == nil {
		_ = m.refresh(ctx)
	}
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
