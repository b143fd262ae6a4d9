package azureblob

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/costwise/batcher/lease"
)

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
