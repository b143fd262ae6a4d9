package azureblob

import (
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
