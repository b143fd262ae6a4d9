package azureblob

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/costwise/batcher/lease"
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

// TestTableApply checks how the log's fold judges each kind of change: an
// acquire wins a partition that is free or whose lease ended before the
// writer's bound of the service's time, renewals and releases count only
// for the holder, and partitions past the count are missing.
func TestTableApply(t *testing.T) {
	base := time.Unix(1_800_000_000, 0)
	ms := func(d time.Duration) int64 { return base.Add(d).UnixMilli() }
	s := func(d time.Duration) int64 { return base.Add(d).Unix() }
	tb := newTable()
	steps := []struct {
		rec  logRecord
		want []string // "" for nil, else "conflict" or "missing"
	}{
		{logRecord{Op: opPartitions, N: 3}, nil},
		{logRecord{Op: opAcquire, Owner: "a", Lo: ms(0), End: s(15 * time.Second), Partitions: []int{0, 1, 3}}, []string{"", "", "missing"}},
		{logRecord{Op: opAcquire, Owner: "b", Lo: ms(time.Second), End: s(16 * time.Second), Partitions: []int{1, 2}}, []string{"conflict", ""}},
		{logRecord{Op: opRenew, Owner: "b", Lo: ms(2 * time.Second), End: s(17 * time.Second), Partitions: []int{0, 2}}, []string{"conflict", ""}},
		{logRecord{Op: opRelease, Owner: "b", Lo: ms(3 * time.Second), Partitions: []int{1, 2}}, []string{"conflict", ""}},
		// a's lease on 1 ends at 15 s: b's bound of 14.999 s has not
		// reached it, 15 s has.
		{logRecord{Op: opAcquire, Owner: "b", Lo: ms(15*time.Second - time.Millisecond), End: s(30 * time.Second), Partitions: []int{1}}, []string{"conflict"}},
		{logRecord{Op: opAcquire, Owner: "b", Lo: ms(15 * time.Second), End: s(30 * time.Second), Partitions: []int{1}}, []string{""}},
		// a may renew 0, which ended and nobody took, but not 1.
		{logRecord{Op: opRenew, Owner: "a", Lo: ms(20 * time.Second), End: s(35 * time.Second), Partitions: []int{0, 1}}, []string{"", "conflict"}},
		{logRecord{Op: opDemand, Owner: "a", Lo: ms(21 * time.Second), N: 2, End: s(40 * time.Second)}, nil},
		{logRecord{Op: opDemand, Owner: "b", Lo: ms(21 * time.Second), N: 1, End: s(40 * time.Second)}, nil},
		{logRecord{Op: opDemand, Owner: "b", Lo: ms(22 * time.Second)}, nil},
		{logRecord{Op: opPartitions, N: 2}, nil}, // never lowers the count
	}
	for i, st := range steps {
		got := tb.apply(&st.rec)
		if len(got) != len(st.want) {
			t.Fatalf("step %d: %d results, want %d", i, len(got), len(st.want))
		}
		for k, err := range got {
			var kind string
			switch {
			case err == nil:
			case errors.As(err, new(lease.ConflictError)):
				kind = "conflict"
			case errors.As(err, new(lease.PartitionMissingError)):
				kind = "missing"
			default:
				kind = err.Error()
			}
			if kind != st.want[k] {
				t.Errorf("step %d, partition %d: %q, want %q", i, st.rec.Partitions[k], kind, st.want[k])
			}
		}
	}
	if tb.partitions != 3 {
		t.Errorf("partitions = %d, want 3", tb.partitions)
	}
	wantLeases := map[int]tableEntry{0: {"a", time.Unix(s(35*time.Second), 0)}, 1: {"b", time.Unix(s(30*time.Second), 0)}}
	if !reflect.DeepEqual(tb.leases, wantLeases) {
		t.Errorf("leases = %v, want %v", tb.leases, wantLeases)
	}
	if len(tb.demands) != 1 || tb.demands["a"].partitions != 2 {
		t.Errorf("demands = %v, want a's 2 only", tb.demands)
	}
	if want := base.Add(22 * time.Second); !tb.clock.Equal(want) {
		t.Errorf("clock = %v, want %v (the latest bound a record vouched for)", tb.clock, want)
	}
}

// TestRecordCodec round-trips each kind of record and refuses lines that
// are not records of this layout.
func TestRecordCodec(t *testing.T) {
	for _, rec := range []logRecord{
		{Gen: "g1", Op: opCheckpoint, Lo: 5, Table: []byte(`{"v":1,"partitions":2,"owners":[],"leases":[],"demands":[]}`)},
		{Gen: "g1", Key: "k1", Op: opAcquire, Owner: "o", Lo: 7, End: 9, Partitions: []int{0, 4}},
		{Gen: "g1", Op: opDemand, Owner: "o", N: 3, End: 9},
		{Gen: "g1", Op: opPartitions, N: 20},
	} {
		line, err := encodeRecord(&rec)
		if err != nil || line[len(line)-1] != '\n' || bytes.Count(line, []byte{'\n'}) != 1 {
			t.Fatalf("encodeRecord(%+v) = %q, %v: want one line", rec, line, err)
		}
		back, err := decodeRecord(line[:len(line)-1])
		if err != nil || !reflect.DeepEqual(*back, rec) {
			t.Fatalf("decodeRecord(%q) = %+v, %v; want %+v", line, back, err, rec)
		}
	}
	for _, line := range []string{
		``, `{`, `{"op":"a","o":"x"}`, `{"g":"1","op":"z"}`, `{"g":"1","op":"t"}`,
		`{"g":"1","op":"a"}`, `{"g":"1","op":"d","n":1}`, `{"g":"1","op":"d","o":"x","n":4294967296}`,
		`{"g":"1","op":"n","n":-1}`,
	} {
		if rec, err := decodeRecord([]byte(line)); err == nil {
			t.Errorf("decodeRecord(%q) = %+v, want an error", line, rec)
		}
	}
}

// TestTableProve checks which outcomes a manager answers from the table it
// read last, without reading the log again: only those that no change by
// another owner since could alter.
func TestTableProve(t *testing.T) {
	m := NewTableLeaseManager("account", "c")
	now := time.Now()
	date := now.Truncate(time.Second)
	m.date, m.sent, m.recv = date, now, now
	m.state = newTable()
	m.state.partitions = 4
	m.state.leases[0] = tableEntry{owner: "a", end: date.Add(10 * time.Second)}
	m.state.leases[1] = tableEntry{owner: "b", end: date.Add(10 * time.Second)}
	m.state.leases[2] = tableEntry{owner: "a", end: date.Add(time.Second)} // within the clock's uncertainty
	type outcome string
	const (
		ok       outcome = "ok"
		conflict outcome = "conflict"
		unproven outcome = "read"
	)
	for i, c := range []struct {
		op   string
		p    int
		want outcome
	}{
		{opRenew, 0, ok},         // a holds it well past now
		{opRenew, 1, conflict},   // b holds it: nothing a could append changes that
		{opRenew, 3, conflict},   // nobody holds it, a's own acquisitions are read back
		{opRenew, 2, unproven},   // a's lease may have ended: another may have taken it
		{opAcquire, 0, ok},       // extending a's own lease
		{opAcquire, 3, unproven}, // free: another may have taken it since
		{opAcquire, 1, unproven}, // b may have released it since
		{opRenew, 4, unproven},   // past the count, which may have grown
		{opRelease, 0, ok},
		{opRenew, 0, unproven}, // released, not yet read back
		{opRelease, 0, unproven},
	} {
		res, proven := m.prove(&logRecord{Op: c.op, Owner: "a", Partitions: []int{c.p}})
		got := unproven
		if proven {
			switch {
			case res[0] == nil:
				got = ok
			case errors.As(res[0], new(lease.ConflictError)):
				got = conflict
			default:
				t.Fatalf("case %d: result %v", i, res[0])
			}
		}
		if got != c.want {
			t.Errorf("case %d: %s of partition %d: %s, want %s", i, c.op, c.p, got, c.want)
		}
	}
}
