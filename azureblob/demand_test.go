package azureblob

import (
	"errors"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	bloblease "github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/costwise/batcher/lease"
)

// TestDemandLive steps through record ages as the server reports them,
// whole seconds on both sides: a record is live while the reported age is
// under ttl + 1 s, so it is never dropped before its ttl truly passed.
func TestDemandLive(t *testing.T) {
	modified := time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		age  time.Duration // Date minus Last-Modified
		ttl  time.Duration
		live bool
	}{
		{0, 2 * time.Second, true},
		{2 * time.Second, 2 * time.Second, true}, // true age anywhere in (1 s, 3 s)
		{3 * time.Second, 2 * time.Second, false},
		{time.Second, 1500 * time.Millisecond, true},
		{2 * time.Second, 1500 * time.Millisecond, true}, // true age may be 1.01 s
		{3 * time.Second, 1500 * time.Millisecond, false},
		{-time.Second, 2 * time.Second, true}, // Date read before a concurrent write
		{15 * time.Second, 15 * time.Second, true},
		{16 * time.Second, 15 * time.Second, false},
	}
	for _, c := range cases {
		if got := demandLive(modified, modified.Add(c.age), c.ttl); got != c.live {
			t.Errorf("age %v, ttl %v: live = %v, want %v", c.age, c.ttl, got, c.live)
		}
	}
}

// TestParseDemand checks which metadata make a demand record.
func TestParseDemand(t *testing.T) {
	s := func(v string) *string { return &v }
	cases := []struct {
		meta       map[string]*string
		partitions uint32
		ttl        time.Duration
		ok         bool
	}{
		{map[string]*string{"partitions": s("3"), "ttlms": s("2000")}, 3, 2 * time.Second, true},
		{map[string]*string{"Partitions": s("7"), "TTLMS": s("15000")}, 7, 15 * time.Second, true},
		{map[string]*string{"partitions": s("0"), "ttlms": s("2000")}, 0, 0, false},
		{map[string]*string{"partitions": s("3")}, 0, 0, false},
		{map[string]*string{"partitions": s("3"), "ttlms": s("-5")}, 0, 0, false},
		{map[string]*string{"partitions": s("x"), "ttlms": s("2000")}, 0, 0, false},
		{map[string]*string{"partitions": s("4294967296"), "ttlms": s("2000")}, 0, 0, false},
		{map[string]*string{"partitions": nil, "ttlms": s("2000")}, 0, 0, false},
		{nil, 0, 0, false},
	}
	for i, c := range cases {
		p, ttl, ok := parseDemand(c.meta)
		if p != c.partitions || ttl != c.ttl || ok != c.ok {
			t.Errorf("case %d: parseDemand = %d, %v, %v; want %d, %v, %v", i, p, ttl, ok, c.partitions, c.ttl, c.ok)
		}
	}
}

// TestPartitionState maps every Azure lease state.
func TestPartitionState(t *testing.T) {
	cases := map[bloblease.StateType]lease.PartitionState{
		bloblease.StateTypeAvailable: lease.PartitionFree,
		bloblease.StateTypeExpired:   lease.PartitionFree,
		bloblease.StateTypeBroken:    lease.PartitionFree,
		bloblease.StateTypeLeased:    lease.PartitionLeased,
		bloblease.StateTypeBreaking:  lease.PartitionLeased,
	}
	for state, want := range cases {
		state := state
		if got := partitionState(&container.BlobProperties{LeaseState: &state}); got != want {
			t.Errorf("lease state %s: %d, want %d", state, got, want)
		}
	}
	if got := partitionState(nil); got != lease.PartitionFree {
		t.Errorf("no properties: %d, want free", got)
	}
}

// TestLeaseSeconds checks the conversion to Azure's whole seconds, which
// rounds up so the store never holds a lease for less than was asked.
func TestLeaseSeconds(t *testing.T) {
	cases := []struct {
		d    time.Duration
		secs int32
		ok   bool
	}{
		{15 * time.Second, 15, true},
		{15*time.Second + time.Millisecond, 16, true},
		{60 * time.Second, 60, true},
		{59500 * time.Millisecond, 60, true},
		{15*time.Second - 1, 0, false},
		{60*time.Second + 1, 0, false},
		{0, 0, false},
		{-time.Second, 0, false},
	}
	for _, c := range cases {
		secs, err := leaseSeconds(c.d)
		var lde lease.DurationError
		if secs != c.secs || (err == nil) != c.ok || (err != nil && !errors.As(err, &lde)) {
			t.Errorf("leaseSeconds(%v) = %d, %v; want %d, ok %v", c.d, secs, err, c.secs, c.ok)
		}
	}
}

// FuzzPartitionIndex checks that only names partitionName produces parse
// as partitions, so demand records and stray blobs are never mistaken for
// them.
func FuzzPartitionIndex(f *testing.F) {
	for _, s := range []string{"0", "7", "499", "007", "-1", "+1", "1e3", "demand/x", "", " 1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		i, ok := partitionIndex(name)
		if ok && (i < 0 || partitionName(i) != name) {
			t.Fatalf("partitionIndex(%q) = %d, which partitionName writes as %q", name, i, partitionName(i))
		}
	})
}
