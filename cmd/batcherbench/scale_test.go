package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/costwise/batcher/lease"
	"github.com/costwise/batcher/sharing"
	"go.uber.org/goleak"
)

func TestFairLevels(t *testing.T) {
	for _, tc := range []struct {
		p       int
		demands []int
		want    []float64
	}{
		{20, []int{20, 20, 20, 20}, []float64{5, 5, 5, 5}},
		{20, []int{20, 20, 20}, []float64{20.0 / 3, 20.0 / 3, 20.0 / 3}},
		{20, []int{1, 20, 0, 20}, []float64{1, 9.5, 0, 9.5}},
		{20, []int{30, 2, 2}, []float64{16, 2, 2}},
		{2, []int{2, 2, 2, 2}, []float64{0.5, 0.5, 0.5, 0.5}},
		{10, []int{0, 0}, []float64{0, 0}},
		{10, []int{3, 4}, []float64{3, 4}}, // demand below supply: all of it
	} {
		got := fairLevels(tc.p, tc.demands)
		for i := range got {
			if math.Abs(got[i]-tc.want[i]) > 1e-9 {
				t.Errorf("fairLevels(%d, %v) = %v, want %v", tc.p, tc.demands, got, tc.want)
				break
			}
		}
	}
}

func TestSettled(t *testing.T) {
	all := func(n, d int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = d
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		p       int
		demands []int
		held    []int
		want    bool
	}{
		{"exact shares", 20, all(4, 20), []int{5, 5, 5, 5}, true},
		{"one off each way", 20, all(4, 20), []int{4, 6, 5, 5}, true},
		{"two off", 20, all(4, 20), []int{3, 7, 5, 5}, false},
		{"uneven split: floor and ceil", 20, all(16, 20), append(all(4, 2), all(12, 1)...), true},
		{"uneven split: one with nothing", 20, all(16, 20), append(append(all(4, 2), all(11, 1)...), 0), false},
		{"nothing held at all", 20, all(16, 20), all(16, 0), false},
		{"above its demand", 20, []int{1, 20}, []int{2, 18}, false},
		{"modest demand served", 20, []int{1, 20, 0}, []int{1, 19, 0}, true},
		{"demand zero holds one", 20, []int{0, 20}, []int{1, 19}, false},
		{"N > P: all held, one each", 4, all(8, 4), []int{1, 1, 0, 1, 0, 0, 1, 0}, true},
		{"N > P: one idle partition", 4, all(8, 4), []int{1, 1, 0, 1, 0, 0, 0, 0}, false},
		{"N > P: one holds two", 4, all(8, 4), []int{2, 1, 0, 1, 0, 0, 0, 0}, false},
		{"N > P after churn: fewer wanted than partitions", 4, []int{1, 0, 0, 0, 0, 0, 0, 4}, []int{1, 0, 0, 0, 0, 0, 0, 3}, true},
	} {
		if got := settled(tc.p, tc.demands, tc.held); got != tc.want {
			t.Errorf("%s: settled(%d, %v, %v) = %v, want %v", tc.name, tc.p, tc.demands, tc.held, got, tc.want)
		}
	}
}

// TestHeldLog checks the bookkeeping: each sample stands for the time
// since the previous one, lands in the bucket of its time (one at a
// bucket's end closes it), and windows are made of whole buckets only.
func TestHeldLog(t *testing.T) {
	l := newHeldLog(4, time.Second)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	demands := []int{4, 4}
	l.add(ms(500), []int{2, 2}, demands)  // bucket 0: 0.5 s of (2, 2)
	l.add(ms(1000), []int{3, 1}, demands) // bucket 0: 0.5 s of (3, 1)
	l.add(ms(2000), []int{1, 1}, demands) // bucket 1: 1 s of (1, 1), 2 idle and wanted
	l.add(ms(2050), []int{4, 0}, demands) // bucket 2, 5% covered: partial
	w := l.windows(1, 1)
	if len(w) != 2 || !slices.Equal(w[0], []float64{2.5, 1.5}) || !slices.Equal(w[1], []float64{1, 1}) {
		t.Fatalf("windows(1, 1) = %v, want [[2.5 1.5] [1 1]]", w)
	}
	if w := l.windows(2, 1); len(w) != 1 || !slices.Equal(w[0], []float64{3.5, 2.5}) {
		t.Fatalf("windows(2, 1) = %v, want [[3.5 2.5]]", w)
	}
	if w := l.windows(3, 1); len(w) != 0 {
		t.Fatalf("windows(3, 1) = %v, want none: the third bucket is partial", w)
	}
	// Held: 4·1 s + 2·1 s + 4·0.05 s of 4·2.05 partition-seconds.
	if got, want := l.use(), 6.2/8.2; math.Abs(got-want) > 1e-9 {
		t.Fatalf("use = %v, want %v", got, want)
	}
	if got, want := l.lostShare(), 2.0/8.2; math.Abs(got-want) > 1e-9 {
		t.Fatalf("lostShare = %v, want %v", got, want)
	}
	if l.minUse != 0.5 {
		t.Fatalf("minUse = %v, want 0.5", l.minUse)
	}
}

// TestLostCapacity checks that idle partitions count as lost only up to
// what the instances want beyond what they hold.
func TestLostCapacity(t *testing.T) {
	for _, tc := range []struct {
		name    string
		held    []int
		demands []int
		want    float64 // lost partition-seconds over one second of 10 partitions
	}{
		{"all held", []int{5, 5}, []int{10, 10}, 0},
		{"idle, wanted", []int{3, 5}, []int{10, 10}, 2},
		{"idle, wanted by less than is idle", []int{3, 5}, []int{4, 5}, 1},
		{"idle, nobody wants more", []int{1, 5}, []int{1, 5}, 0},
		{"nobody wants anything", []int{0, 0}, []int{0, 0}, 0},
	} {
		l := newHeldLog(10, time.Second)
		l.add(time.Second, tc.held, tc.demands)
		if got := l.lost; math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: lost %v partition-seconds, want %v", tc.name, got, tc.want)
		}
	}
}

func TestJainRange(t *testing.T) {
	lo, mean, ok := jainRange([][]float64{{1, 1, 1, 1}, {2, 0, 0, 0}})
	if !ok || lo != 0.25 || mean != 0.625 {
		t.Fatalf("jainRange = %v %v %v, want 0.25 0.625 true", lo, mean, ok)
	}
	if _, _, ok := jainRange(nil); ok {
		t.Fatal("jainRange of no window is ok")
	}
}

// grantingManager grants every lease asked for, as a broken store would.
type grantingManager struct{ lease.Manager }

func (grantingManager) Acquire(context.Context, int, string, time.Duration) error { return nil }
func (grantingManager) Renew(context.Context, int, string, time.Duration) error   { return nil }
func (grantingManager) Release(context.Context, int, string) error                { return nil }

func TestLedger(t *testing.T) {
	ctx := context.Background()
	l := newLedger()
	a, b := l.wrap(grantingManager{}), l.wrap(grantingManager{})
	hour := time.Hour
	_ = a.Acquire(ctx, 0, "a", hour)
	_ = a.Acquire(ctx, 1, "a", hour)
	_ = b.Acquire(ctx, 2, "b", hour)
	granted, acq := l.holdings(time.Now())
	if granted["a"] != 2 || granted["b"] != 1 || acq["a"] != 2 || acq["b"] != 1 {
		t.Fatalf("holdings = %v %v, want a: 2, b: 1", granted, acq)
	}
	if granted, _ := l.holdings(time.Now().Add(2 * hour)); len(granted) != 0 {
		t.Fatalf("grants outlive their lease: %v", granted)
	}
	_ = a.Renew(ctx, 1, "a", hour)
	_ = a.Release(ctx, 0, "a")
	_ = b.Release(ctx, 1, "b") // not b's: changes nothing
	if granted, _ := l.holdings(time.Now()); granted["a"] != 1 {
		t.Fatalf("after a released 0: a holds %d, want 1", granted["a"])
	}
	if l.storeDoubles() != 0 {
		t.Fatalf("doubles = %d before any", l.storeDoubles())
	}
	_ = b.Acquire(ctx, 1, "b", hour) // the store grants a's partition to b
	if l.storeDoubles() != 1 {
		t.Fatalf("doubles = %d, want 1", l.storeDoubles())
	}
	if granted, _ := l.holdings(time.Now()); granted["a"] != 0 || granted["b"] != 2 {
		t.Fatalf("after b took 1: %v, want a: 0, b: 2", granted)
	}
}

// TestProvisionOnce checks that the namespace is provisioned once for all
// the instances that share a ledger.
func TestProvisionOnce(t *testing.T) {
	l := newLedger()
	calls := 0
	m := &provisionCounter{calls: &calls}
	for i := 0; i < 3; i++ {
		if err := l.wrap(m).Provision(context.Background(), 20, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.wrap(m).Provision(context.Background(), 30, nil); err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Fatalf("%d provisions reached the store, want 2 (20, then 30)", calls)
	}
}

type provisionCounter struct {
	lease.Manager
	calls *int
}

func (p *provisionCounter) Provision(context.Context, int, func(string, int, string)) error {
	*p.calls++
	return nil
}

func TestCountingViolations(t *testing.T) {
	owners := []string{"a", "b", "c"}
	granted := map[string]int{"a": 2, "b": 1}
	before := map[string]uint64{"a": 5, "b": 1}
	after := map[string]uint64{"a": 5, "b": 2, "c": 0}
	// a counts what it holds; b one more, acquired between the reads; c
	// counts one it was never granted.
	got := countingViolations(owners, []int{2, 2, 1}, granted, before, after)
	if !slices.Equal(got, []int{2}) {
		t.Fatalf("violations = %v, want [2]", got)
	}
}

func TestScaleFlags(t *testing.T) {
	var errOut bytes.Buffer
	opts, err := parseFlags([]string{"--scenarios", "scale", "--scale-n", "4, 128", "--scale-p", "500", "--scale-steady", "3s"}, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	p := opts.withOverrides(planFor(false))
	if !slices.Equal(p.scale.ns, []int{4, 128}) || !slices.Equal(p.scale.ps, []int{500}) ||
		p.scale.steady != 3*time.Second || p.scale.wideSteady != 3*time.Second || p.scale.churn != 30*time.Second {
		t.Fatalf("scale plan %+v", p.scale)
	}
	for _, bad := range [][]string{{"--scale-p", "501"}, {"--scale-n", "0"}, {"--scale-n", "x"}, {"--scale-churn", "-1s"}} {
		if _, err := parseFlags(bad, &errOut); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
	full, _ := parseFlags(nil, &errOut)
	quick, _ := parseFlags([]string{"--quick"}, &errOut)
	if slices.Contains(full.scenarios, "scale") || !slices.Contains(quick.scenarios, "scale") {
		t.Fatalf("default scenarios: full %v, quick %v; want scale in quick mode only", full.scenarios, quick.scenarios)
	}
}

// TestScaleRuns runs a small cell on the memory store: it must run without
// error, report its figures, and never find an instance counting more than
// the store granted it, however the machine schedules it.
func TestScaleRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for seconds")
	}
	defer goleak.VerifyNone(t)
	var out, errOut bytes.Buffer
	code := run([]string{"--json", "--quick", "--scenarios", "scale", "--stores", "memory",
		"--scale-n", "6", "--scale-p", "4", "--scale-steady", "1s", "--scale-churn", "1s"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d; stderr: %s", code, errOut.String())
	}
	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	if len(rep.Results) != 1 || len(rep.Tables) != 1 || len(rep.Tables[0].Rows) != 1 {
		t.Fatalf("want one row and a table of one row; got %+v and %+v", rep.Results, rep.Tables)
	}
	v := rep.Results[0].Values
	if v["samples"] == 0 || v["violations"] != 0 || v["store_doubles"] != 0 {
		t.Fatalf("samples %v, violations %v, store doubles %v; want samples and no violation", v["samples"], v["violations"], v["store_doubles"])
	}
}

// TestLedgerKeepsBatchRenewal checks that the recording wrapper renews in
// one call where the store can, and records each renewed grant.
func TestLedgerKeepsBatchRenewal(t *testing.T) {
	ctx := context.Background()
	l := newLedger()
	mem := sharing.NewMemoryLeaseManager()
	if err := mem.Provision(ctx, 4, nil); err != nil {
		t.Fatal(err)
	}
	m := l.wrap(mem)
	b, ok := m.(lease.BatchRenewer)
	if !ok {
		t.Fatal("the wrapper of a lease.BatchRenewer is not one")
	}
	if _, ok := l.wrap(grantingManager{}).(lease.BatchRenewer); ok {
		t.Fatal("the wrapper of a manager without batch renewal claims it")
	}
	short := 50 * time.Millisecond
	for _, p := range []int{0, 1} {
		if err := m.Acquire(ctx, p, "a", short); err != nil {
			t.Fatal(err)
		}
	}
	results, err := b.RenewBatch(ctx, []int{0, 1, 2}, "a", time.Hour)
	if err != nil || len(results) != 3 || results[0] != nil || results[1] != nil || results[2] == nil {
		t.Fatalf("RenewBatch = %v, %v; want 0 and 1 renewed, 2 refused", results, err)
	}
	// The renewed grants outlast the short leases they replaced.
	if granted, _ := l.holdings(time.Now().Add(time.Second)); granted["a"] != 2 {
		t.Fatalf("a holds %d a second later, want 2", granted["a"])
	}
}
