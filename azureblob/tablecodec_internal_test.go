package azureblob

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestTableRoundTrip checks that a table reads back as written, owners
// named once however many leases they hold.
func TestTableRoundTrip(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	tb := newTable()
	tb.partitions = 6
	tb.leases[0] = tableEntry{owner: "a", end: at}
	tb.leases[5] = tableEntry{owner: "b", end: at.Add(time.Second)}
	tb.leases[3] = tableEntry{owner: "a", end: at.Add(2 * time.Second)}
	tb.demands["a"] = tableDemand{partitions: 4, end: at.Add(15 * time.Second)}
	tb.demands["c"] = tableDemand{partitions: 1, end: at}
	b, err := tb.encode()
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	if n := strings.Count(string(b), `"a"`); n != 1 {
		t.Fatalf("owner a named %d times in %s, want once", n, b)
	}
	got, err := decodeTable(b)
	if err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	if got.partitions != 6 || len(got.leases) != 3 || len(got.demands) != 2 {
		t.Fatalf("read back %+v from %s", got, b)
	}
	for p, e := range tb.leases {
		if g := got.leases[p]; g.owner != e.owner || !g.end.Equal(e.end) {
			t.Fatalf("lease %d read back as %+v, want %+v", p, g, e)
		}
	}
	for o, d := range tb.demands {
		if g := got.demands[o]; g.partitions != d.partitions || !g.end.Equal(d.end) {
			t.Fatalf("demand of %s read back as %+v, want %+v", o, g, d)
		}
	}
	again, _ := got.encode()
	if string(again) != string(b) {
		t.Fatalf("equal tables encode differently:\n%s\n%s", b, again)
	}
}

// TestTableRefusesWhatItCannotRead checks that damaged or foreign content
// is an error, never a table with wrong entries.
func TestTableRefusesWhatItCannotRead(t *testing.T) {
	for _, body := range []string{
		``,
		`not json`,
		`{"v":2,"partitions":1}`,
		`{"v":1,"partitions":-1}`,
		`{"v":1,"partitions":2,"owners":["a"],"leases":[[0,1,5]]}`,
		`{"v":1,"partitions":2,"owners":["a"],"leases":[[2,0,5]]}`,
		`{"v":1,"partitions":2,"owners":[""],"leases":[[0,0,5]]}`,
		`{"v":1,"partitions":2,"owners":["a"],"demands":[[0,0,5]]}`,
		`{"v":1,"partitions":2,"owners":["a"],"demands":[[0,4294967296,5]]}`,
	} {
		if tb, err := decodeTable([]byte(body)); err == nil {
			t.Errorf("decodeTable(%q) = %+v, want an error", body, tb)
		}
	}
	err := TableError{Container: "c", Generation: 3, Err: errors.New("bad")}
	if !strings.Contains(err.Error(), "c/"+TableLogPrefix+"000000003") || !errors.Is(err, err.Err) {
		t.Errorf("TableError %q does not name the blob or unwrap", err)
	}
}

// TestTableServiceTime checks the bounds of the service's clock and the
// end of a lease: a Date of 12:00:00 received 50 ms after the request was
// sent means the service's time is at least 12:00:00 at the arrival and
// under 12:00:01 at the sending; a 15-s lease sent 2 s later ends, in whole
// seconds, no earlier than 12:00:18.
func TestTableServiceTime(t *testing.T) {
	m := NewTableLeaseManager("a", "c")
	if _, _, ok := m.serviceTime(time.Now()); ok {
		t.Fatal("serviceTime known before any response")
	}
	sent := time.Now()
	date := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	m.mu.Lock()
	m.date, m.sent, m.recv = date, sent, sent.Add(50*time.Millisecond)
	m.mu.Unlock()
	later := sent.Add(2 * time.Second)
	lo, hi, ok := m.serviceTime(later)
	if !ok || !lo.Equal(date.Add(1950*time.Millisecond)) || !hi.Equal(date.Add(3*time.Second)) {
		t.Fatalf("serviceTime 2 s after sending = [%v, %v), want [12:00:01.95, 12:00:03)", lo, hi)
	}
	if end := m.endAfter(later, 15*time.Second); !end.Equal(date.Add(18 * time.Second)) {
		t.Fatalf("endAfter 15 s = %v, want 12:00:18", end)
	}
	if end := m.endAfter(later.Add(time.Millisecond), 15*time.Second); !end.Equal(date.Add(19 * time.Second)) {
		t.Fatalf("endAfter 15 s a millisecond later = %v, want 12:00:19 (rounded up)", end)
	}
}

// FuzzDecodeTable checks that no input makes the decoder panic, and that
// what it accepts encodes and reads back the same.
func FuzzDecodeTable(f *testing.F) {
	f.Add([]byte(`{"v":1,"partitions":3,"owners":["a","b"],"leases":[[0,0,10],[2,1,11]],"demands":[[1,3,20]]}`))
	f.Add([]byte(`{"v":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tb, err := decodeTable(b)
		if err != nil {
			return
		}
		out, err := tb.encode()
		if err != nil {
			t.Fatalf("encode of a decoded table: %v", err)
		}
		back, err := decodeTable(out)
		if err != nil || back.partitions != tb.partitions || len(back.leases) != len(tb.leases) || len(back.demands) != len(tb.demands) {
			t.Fatalf("re-read %s: %+v, %v", out, back, err)
		}
	})
}
