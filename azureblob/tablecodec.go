package azureblob

import (
	cryptorand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// tableVersion is the layout version written in every table; a table of
// another version is refused rather than misread.
const tableVersion = 1

// tableDoc is the table as stored: JSON with each owner named once and
// times as Unix seconds of the service's clock.
//
//	{"v":1,"partitions":20,"owners":["<uuid>",…],
//	 "leases":[[partition,owner index,end],…],"demands":[[owner index,partitions,end],…]}
type tableDoc struct {
	Version    int        `json:"v"`
	Partitions int        `json:"partitions"`
	Owners     []string   `json:"owners"`
	Leases     [][3]int64 `json:"leases"`
	Demands    [][3]int64 `json:"demands"`
}

// encode returns t as stored, leases by partition and owners in order of
// first use, so that equal tables encode alike.
func (t *table) encode() ([]byte, error) {
	doc := tableDoc{Version: tableVersion, Partitions: t.partitions, Owners: []string{}, Leases: [][3]int64{}, Demands: [][3]int64{}}
	index := map[string]int64{}
	ownerIndex := func(o string) int64 {
		i, ok := index[o]
		if !ok {
			i = int64(len(doc.Owners))
			index[o] = i
			doc.Owners = append(doc.Owners, o)
		}
		return i
	}
	for _, p := range slices.Sorted(maps.Keys(t.leases)) {
		e := t.leases[p]
		doc.Leases = append(doc.Leases, [3]int64{int64(p), ownerIndex(e.owner), e.end.Unix()})
	}
	for _, o := range slices.Sorted(maps.Keys(t.demands)) {
		d := t.demands[o]
		doc.Demands = append(doc.Demands, [3]int64{ownerIndex(o), int64(d.partitions), d.end.Unix()})
	}
	return json.Marshal(doc)
}

// decodeTable reads a stored table, checking every reference in it.
func decodeTable(b []byte) (*table, error) {
	var doc tableDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	if doc.Version != tableVersion {
		return nil, fmt.Errorf("layout version %d, want %d", doc.Version, tableVersion)
	}
	if doc.Partitions < 0 {
		return nil, fmt.Errorf("negative partition count %d", doc.Partitions)
	}
	owner := func(i int64) (string, error) {
		if i < 0 || i >= int64(len(doc.Owners)) || doc.Owners[i] == "" {
			return "", fmt.Errorf("owner index %d of %d owners", i, len(doc.Owners))
		}
		return doc.Owners[i], nil
	}
	t := &table{partitions: doc.Partitions, leases: make(map[int]tableEntry, len(doc.Leases)), demands: make(map[string]tableDemand, len(doc.Demands))}
	for _, l := range doc.Leases {
		o, err := owner(l[1])
		if err != nil {
			return nil, err
		}
		if l[0] < 0 || l[0] >= int64(doc.Partitions) {
			return nil, fmt.Errorf("lease on partition %d of %d", l[0], doc.Partitions)
		}
		t.leases[int(l[0])] = tableEntry{owner: o, end: time.Unix(l[2], 0)}
	}
	for _, d := range doc.Demands {
		o, err := owner(d[0])
		if err != nil {
			return nil, err
		}
		if d[1] <= 0 || d[1] > 1<<32-1 {
			return nil, errors.New("demand out of range")
		}
		t.demands[o] = tableDemand{partitions: uint32(d[1]), end: time.Unix(d[2], 0)}
	}
	return t, nil
}

// The kinds of record in the lease log.
const (
	opCheckpoint = "t" // the whole table: the first record of a generation
	opPartitions = "n" // raise the partition count to N
	opAcquire    = "a" // acquire Partitions for Owner until End
	opRenew      = "r" // renew Owner's leases on Partitions until End
	opRelease    = "x" // release Owner's leases on Partitions
	opDemand     = "d" // Owner wants N partitions until End; 0 withdraws
)

// logRecord is one line of the lease log: JSON, ended by a newline.
//
//	{"g":"<generation id>","k":"<record key>","op":"a","o":"<owner>","lo":<ms>,"end":<s>,"p":[3,7]}
//
// Gen is the id of the generation the writer read, so a blob written anew
// under the same name is never mistaken for the one read before. Key is
// random, so the writer finds its own record in the log. Lo is the
// writer's lower bound of the service's time when it sent the record, in
// Unix milliseconds; End is a Unix second of the service's clock.
type logRecord struct {
	Gen        string          `json:"g"`
	Key        string          `json:"k,omitempty"`
	Op         string          `json:"op"`
	Owner      string          `json:"o,omitempty"`
	Lo         int64           `json:"lo,omitempty"`
	End        int64           `json:"end,omitempty"`
	N          int64           `json:"n,omitempty"`
	Partitions []int           `json:"p,omitempty"`
	Table      json.RawMessage `json:"t,omitempty"`
}

// encodeRecord returns rec as a line of the log, newline included.
func encodeRecord(rec *logRecord) ([]byte, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// decodeRecord reads one line of the log (without its newline), checking
// that it is a record this version writes.
func decodeRecord(line []byte) (*logRecord, error) {
	var rec logRecord
	if err := json.Unmarshal(line, &rec); err != nil {
		return nil, err
	}
	if rec.Gen == "" {
		return nil, errors.New("no generation id")
	}
	switch rec.Op {
	case opCheckpoint:
		if len(rec.Table) == 0 {
			return nil, errors.New("a table record without a table")
		}
	case opPartitions:
		if rec.N < 0 || rec.N > 1<<31-1 {
			return nil, fmt.Errorf("partition count %d out of range", rec.N)
		}
	case opDemand:
		if rec.Owner == "" || rec.N < 0 || rec.N > 1<<32-1 {
			return nil, errors.New("a demand without an owner, or out of range")
		}
	case opAcquire, opRenew, opRelease:
		if rec.Owner == "" {
			return nil, fmt.Errorf("a %q record without an owner", rec.Op)
		}
	default:
		return nil, fmt.Errorf("unknown record kind %q", rec.Op)
	}
	return &rec, nil
}

// newGenerationID returns a random id for a new generation of the log.
func newGenerationID() string { return randomHex() }

// newRecordKey returns a random key for a record of the log.
func newRecordKey() string { return randomHex() }

// randomHex returns 64 random bits in hexadecimal.
func randomHex() string {
	var b [8]byte
	_, _ = cryptorand.Read(b[:])
	return hex.EncodeToString(b[:])
}
