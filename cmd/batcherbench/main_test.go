package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ds := make([]time.Duration, 100)
	for i := range ds {
		ds[len(ds)-1-i] = time.Duration(i+1) * time.Millisecond // 100..1, unsorted
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := percentile(ds, tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("percentile of nothing = %v, want 0", got)
	}
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median = %v, want 2", got)
	}
}

// TestWindows checks that amounts land in the window of their time, that
// amounts before the first window or in a partial last one are left out.
func TestWindows(t *testing.T) {
	start := time.Unix(1000, 0)
	log := newWindowLog(start)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	log.add(at(500), 100)  // warm-up: excluded
	log.add(at(1050), 1)   // window 0 starts at 1050
	log.add(at(2049), 2)   // still window 0
	log.add(at(2050), 4)   // window 1
	log.add(at(3049), 8)   // window 1
	log.add(at(3060), 100) // partial window: excluded
	got := log.windows(1050*time.Millisecond, time.Second, 3500*time.Millisecond)
	if len(got) != 2 || got[0] != 3 || got[1] != 12 {
		t.Fatalf("windows = %v, want [3 12]", got)
	}
	mean, lo, hi := spread(got)
	if mean != 7.5 || lo != 3 || hi != 12 {
		t.Fatalf("spread = %v %v %v, want 7.5 3 12", mean, lo, hi)
	}
}

func TestPickList(t *testing.T) {
	got, err := pickList("shared, rate,throughput", scenarioNames, "scenario")
	if err != nil || strings.Join(got, ",") != "throughput,rate,shared" {
		t.Fatalf("pickList = %v, %v; want the known order throughput,rate,shared", got, err)
	}
	if _, err := pickList("rate,nope", scenarioNames, "scenario"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("unknown name: err = %v, want one naming it", err)
	}
	if _, err := pickList(" , ", scenarioNames, "scenario"); err == nil {
		t.Fatal("empty list: no error")
	}
}

// TestMissingStore checks the exit status for a store that is not
// configured: skipped outside CI, an error (exit 1) under CI=true.
func TestMissingStore(t *testing.T) {
	t.Setenv("BATCHER_AZURITE_URL", "")
	for _, tc := range []struct {
		ci         string
		wantCode   int
		wantStatus string
	}{{"", 0, statusSkipped}, {"true", 1, statusError}} {
		t.Setenv("CI", tc.ci)
		var out, errOut bytes.Buffer
		code := run([]string{"--json", "--scenarios", "shared", "--stores", "azurite"}, &out, &errOut)
		if code != tc.wantCode {
			t.Fatalf("CI=%q: exit %d, want %d; stderr: %s", tc.ci, code, tc.wantCode, errOut.String())
		}
		var rep report
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("CI=%q: output is not JSON: %v\n%s", tc.ci, err, out.String())
		}
		if len(rep.Results) != 1 || rep.Results[0].Status != tc.wantStatus || rep.Results[0].Store != "azurite" {
			t.Fatalf("CI=%q: results %+v, want one %s row for azurite", tc.ci, rep.Results, tc.wantStatus)
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--scenarios", "everything"},
		{"--scenarios", "hotkeys", "--hotkeys-only", "zipf"},
		{"--scenarios", "hotkeys", "--hotkeys-p99-pairs", "21"},
		{"--scenarios", "hotkeys", "--hotkeys-p99-pairs", "-1"},
	} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 2 {
			t.Fatalf("%q: exit %d, want 2", args, code)
		}
		if out.Len() != 0 {
			t.Fatalf("%q: a report was written for bad flags: %s", args, out.String())
		}
	}
}

// TestHotkeysOnly: --hotkeys-only picks one part of the hotkeys scenario.
func TestHotkeysOnly(t *testing.T) {
	for _, part := range []string{"mix", "onekey"} {
		opts, err := parseFlags([]string{"--scenarios", "hotkeys", "--hotkeys-only", part}, io.Discard)
		if err != nil || opts.hotOnly != part {
			t.Fatalf("--hotkeys-only %s: %+v %v", part, opts.hotOnly, err)
		}
	}
}

// TestMarkdown checks the table layout and that a pipe in a cell cannot
// break it.
func TestMarkdown(t *testing.T) {
	rep := newReport(options{})
	rep.add(result{Scenario: "s", Case: "a|b", Ours: "1", Status: statusMet, Note: "n"})
	rep.finish()
	var out bytes.Buffer
	if err := rep.write(&out, false); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if !strings.Contains(s, "| s | a\\|b | – | 1 | – | – | – | met |") || !strings.Contains(s, "- s, a|b: n") {
		t.Fatalf("unexpected Markdown:\n%s", s)
	}
}
