package leasetest

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/costwise/batcher/lease"
)

// Owners used by the subtests. Azure needs lease ids that are GUIDs, so
// they are fixed GUIDs that read as A, B and C.
const (
	ownerA = "aaaaaaaa-0000-4000-8000-000000000001"
	ownerB = "bbbbbbbb-0000-4000-8000-000000000002"
	ownerC = "cccccccc-0000-4000-8000-000000000003"
)

// owner returns the i-th of many distinct GUID owners.
func owner(i int) string {
	return fmt.Sprintf("dddddddd-0000-4000-8000-%012d", i)
}

// report is a provisioning event as a LeaseManager reports it.
type report struct {
	event string
	val   int
	msg   string
}

// recorder collects provisioning reports; it is safe for concurrent use.
type recorder struct {
	mu   sync.Mutex
	list []report
}

func (r *recorder) report(event string, val int, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, report{event, val, msg})
}

// blobCounts returns, for each partition index, how many times it was
// reported created and verified.
func (r *recorder) blobCounts() (created, verified map[int]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	created, verified = map[int]int{}, map[int]int{}
	for _, e := range r.list {
		switch e.event {
		case lease.CreatedBlobEvent:
			created[e.val]++
		case lease.VerifiedBlobEvent:
			verified[e.val]++
		}
	}
	return created, verified
}

// count returns how many reports had event.
func (r *recorder) count(event string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.list {
		if e.event == event {
			n++
		}
	}
	return n
}

// wantNoError fails the test when err is not nil.
func wantNoError(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: unexpected error: %v", what, err)
	}
}

// wantConflict fails the test unless err is a LeaseConflictError for
// partition.
func wantConflict(t *testing.T, what string, err error, partition int) {
	t.Helper()
	var conflict lease.ConflictError
	if !errors.As(err, &conflict) {
		t.Fatalf("%s: got error %v, want a lease.ConflictError", what, err)
	}
	if conflict.Partition != partition {
		t.Fatalf("%s: LeaseConflictError.Partition = %d, want %d", what, conflict.Partition, partition)
	}
}

// wantMissing fails the test unless err is a PartitionMissingError for
// partition.
func wantMissing(t *testing.T, what string, err error, partition int) {
	t.Helper()
	var missing lease.PartitionMissingError
	if !errors.As(err, &missing) {
		t.Fatalf("%s: got error %v, want a lease.PartitionMissingError", what, err)
	}
	if missing.Partition != partition {
		t.Fatalf("%s: PartitionMissingError.Partition = %d, want %d", what, missing.Partition, partition)
	}
}

// stateString is the compact form of a []PartitionState (L leased, F free, M missing), for messages.
func stateString(p []lease.PartitionState) string {
	b := make([]byte, len(p))
	for i, s := range p {
		switch s {
		case lease.PartitionLeased:
			b[i] = 'L'
		case lease.PartitionFree:
			b[i] = 'F'
		case lease.PartitionMissing:
			b[i] = 'M'
		default:
			b[i] = '?'
		}
	}
	return string(b)
}

// snapshot reads count partitions and fails the test on error.
func (s suite) snapshot(t *testing.T, m lease.Manager, count int) lease.Snapshot {
	t.Helper()
	snap, err := m.Snapshot(s.ctx(t), count)
	wantNoError(t, fmt.Sprintf("Snapshot(%d)", count), err)
	if len(snap.Partitions) != count {
		t.Fatalf("Snapshot(%d) returned %d partitions", count, len(snap.Partitions))
	}
	return snap
}

// wantStates fails the test unless the partitions are in the states given
// compactly by want (see states).
func (s suite) wantStates(t *testing.T, m lease.Manager, want string) {
	t.Helper()
	snap := s.snapshot(t, m, len(want))
	if got := stateString(snap.Partitions); got != want {
		t.Fatalf("Snapshot partitions = %s, want %s (L leased, F free, M missing)", got, want)
	}
}

// wantDemands fails the test unless the live demands are exactly want.
func (s suite) wantDemands(t *testing.T, m lease.Manager, count int, want map[string]uint32) {
	t.Helper()
	got := s.snapshot(t, m, count).Demands
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Snapshot demands = %v, want %v", got, want)
	}
}
