package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestScenario runs the sample briefly, with and without the library, and
// checks what the sample exists to show: with the library no user request
// is throttled, every one is served and no record is lost; without it the
// user requests meet 429s; and the report is written and needs nothing
// from the network.
func TestScenario(t *testing.T) {
	cfg := defaultConfig()
	cfg.duration = 8 * time.Second
	// Under -race the process runs several times slower, and on a shared
	// machine it is stopped now and then; a stop across a window boundary
	// lets each batcher release up to one flush interval's worth at once
	// (the bound its credit keeps after a stall), and the users' arrivals
	// missed meanwhile come together. A lighter user load and one bulk
	// request per replica of headroom keep that within the window.
	cfg.interactiveRate = 100
	cfg.headroom = -1
	cfg.report = filepath.Join(t.TempDir(), "report.html")
	var logs, out bytes.Buffer
	log := zerolog.New(zerolog.SyncWriter(&logs)).Level(zerolog.WarnLevel)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	runs, err := demo(ctx, cfg, log, &out)
	if err != nil {
		t.Fatalf("demo: %v\nlogs:\n%s", err, logs.String())
	}
	if len(runs) != 2 || !runs[0].Library || runs[1].Library {
		t.Fatalf("got %d runs, want the library run then the direct one", len(runs))
	}
	lib, direct := summarise(runs[0]), summarise(runs[1])
	t.Logf("summary:\n%s", out.String())

	checkJobs(t, runs[0])
	checkJobs(t, runs[1])
	if lib.Users.Requests < 300 {
		t.Errorf("with the library: %d user requests, want about 100 a second", lib.Users.Requests)
	}
	if lib.Users.Throttled != 0 || runs[0].Total.InteractiveThrottled != 0 {
		t.Errorf("with the library: %d user requests throttled (%d 429s at the datastore), want 0",
			lib.Users.Throttled, runs[0].Total.InteractiveThrottled)
	}
	if lib.Users.Failed != 0 || lib.Failed != 0 {
		t.Errorf("with the library: %d user requests failed and %d records lost, want none", lib.Users.Failed, lib.Failed)
	}
	// Utilisation and latency are the default run's claims: under -race on
	// a shared machine they measure the machine, so they are not checked
	// here.
	if direct.Users.Throttled == 0 {
		t.Error("without the library: no user request throttled; the comparison shows nothing")
	}
	for _, want := range []string{"429s in all", "user latency p50 / p99 / max", "Goals with the library",
		"User requests throttled: 0 with the library", "batcher.NewWatcher("} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	checkReport(t, cfg.report)
}

// checkJobs checks that every job of r was answered with all its records
// written.
func checkJobs(t *testing.T, r *runResult) {
	t.Helper()
	if len(r.Jobs) != 4 {
		t.Fatalf("%s: %d jobs, want 4", r.label(), len(r.Jobs))
	}
	for _, o := range r.Jobs {
		if o.Err != "" || o.Result.Written != int64(o.Spec.Records) || o.Result.Failed != 0 {
			t.Errorf("%s: job %s: err %q, wrote %d of %d, %d failed", r.label(), o.Spec.Name, o.Err,
				o.Result.Written, o.Spec.Records, o.Result.Failed)
		}
	}
}

// checkReport checks that the report exists, has its charts and tables,
// and loads nothing from elsewhere.
func checkReport(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	page := string(b)
	for _, want := range []string{"<!doctype html>", "<svg", "budget 20,000 RU/s", "With the library", "Without the library",
		"429s in all", `class="outcome"`, "p99 latency of the user requests", "github.com/costwise/batcher",
		"<h1>User requests throttled: 0 with the library", "batcher.NewSharedResource(", "alone on this machine"} {
		if !strings.Contains(page, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// The reader sees the outcome and the library code before any goal's verdict.
	h1, code, verdict := strings.Index(page, "<h1>"), strings.Index(page, "<pre><code>"), strings.Index(page, `<td class="m`)
	if h1 < 0 || code < h1 || verdict < code {
		t.Errorf("report order: headline at %d, code at %d, first verdict at %d; want them in that order", h1, code, verdict)
	}
	if n := strings.Count(page, "<svg"); n != 7 {
		t.Errorf("report has %d charts, want 7 (the users' latency, then three per run)", n)
	}
	for _, bad := range []string{"<script", "src=", "href=", "@import", "url(", "<link", "http://", "https://"} {
		if strings.Contains(page, bad) {
			t.Errorf("report is not self-contained: it contains %q", bad)
		}
	}
}

// TestDatastoreWindows checks the simulated datastore's accounting: it
// accepts requests while the window has room, throttles the one that would
// pass the budget with a retry-after that points at the next window, and
// starts afresh in the next window.
func TestDatastoreWindows(t *testing.T) {
	d := newDatastore(1000, 0)
	now := d.Start().Add(200 * time.Millisecond)
	d.now = func() time.Time { return now }
	ctx := context.Background()
	steps := []struct {
		at    time.Duration // since the start
		ru    uint32
		retry time.Duration // 0: accepted
	}{
		{200 * time.Millisecond, 600, 0},
		{300 * time.Millisecond, 400, 0},                        // exactly the budget
		{400 * time.Millisecond, 1, 600 * time.Millisecond},     // one RU too many
		{999 * time.Millisecond, 100, 1 * time.Millisecond},     // still window 0
		{1000 * time.Millisecond, 1000, 0},                      // window 1 is empty
		{2500 * time.Millisecond, 1001, 500 * time.Millisecond}, // more than a whole window
	}
	for i, s := range steps {
		now = d.Start().Add(s.at)
		retry, err := d.Write(ctx, "r1", s.ru, false)
		if err != nil || retry != s.retry {
			t.Fatalf("step %d (%v, %d RU): retry %v err %v, want retry %v", i, s.at, s.ru, retry, err, s.retry)
		}
	}
	by, total := d.Window(0)
	if total.AcceptedRU != 1000 || total.Throttled != 2 || by["r1"].ThrottledRU != 101 {
		t.Errorf("window 0: %+v (r1 %+v), want 1000 RU accepted and 2 throttled (101 RU)", total, by["r1"])
	}
	if _, w1 := d.Window(1); w1.AcceptedRU != 1000 || w1.Throttled != 0 {
		t.Errorf("window 1: %+v, want 1000 RU accepted", w1)
	}
	if got := d.Total(); got.AcceptedRU != 2000 || got.Throttled != 3 {
		t.Errorf("total %+v, want 2000 RU accepted, 3 throttled", got)
	}
}

// TestScenarioSizes checks that the default scenario is go-batcher's
// example scaled: two large jobs at once, two smaller ones later, and in
// all about the budget times the duration (less the headroom).
func TestScenarioSizes(t *testing.T) {
	cfg := defaultConfig()
	specs := scenario(cfg)
	if len(specs) != 4 {
		t.Fatalf("%d jobs, want 4", len(specs))
	}
	var ru float64
	for i, s := range specs {
		ru += float64(s.Records) * float64(cfg.cost)
		if s.Replica != i {
			t.Errorf("job %d goes to replica %d", i, s.Replica)
		}
	}
	if specs[0].At != 0 || specs[1].At != 0 || specs[2].At != cfg.duration/4 || specs[0].Records <= specs[2].Records {
		t.Errorf("scenario %+v: want two large jobs at 0 and smaller ones at a quarter of the duration", specs)
	}
	full := float64(cfg.budget) * cfg.duration.Seconds()
	if ru < 0.8*full || ru > full {
		t.Errorf("scenario totals %.0f RU, want 80-100%% of the budget × duration (%.0f)", ru, full)
	}
}

// TestConfig checks the capacity arithmetic and the flag checks.
func TestConfig(t *testing.T) {
	cfg, err := parseFlags(nil, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.interactiveRU() != 180 || cfg.reserve() != 200 || cfg.shared() != 19000 || cfg.unused() != 200 || cfg.leaseInterval() != 100 {
		t.Errorf("defaults: users %.0f RU/s a replica, reserve %d, shared %d, unused %d, interval %d; want 180, 200, 19000, 200, 100",
			cfg.interactiveRU(), cfg.reserve(), cfg.shared(), cfg.unused(), cfg.leaseInterval())
	}
	if total := uint32(cfg.replicas)*cfg.reserve() + cfg.shared() + cfg.unused(); total != cfg.budget {
		t.Errorf("reservations + shared + unused = %d, want the budget %d", total, cfg.budget)
	}
	cfg, err = parseFlags([]string{"--reserved", "0", "--headroom", "-1", "--store", "azure", "--azure-connection-string", "UseDevelopmentStorage=true"}, os.Stderr)
	if err != nil || cfg.shared() != 19500 || cfg.reserve() != 0 || cfg.leaseInterval() != 500 {
		t.Errorf("--reserved 0 --headroom -1: shared %d, reserve %d, interval %d, err %v; want 19500 (20000 less 4 requests, in partitions of 250), 0, 500",
			cfg.shared(), cfg.reserve(), cfg.leaseInterval(), err)
	}
	cfg, err = parseFlags([]string{"--replicas", "64"}, os.Stderr)
	if err != nil || cfg.reserve() != 50 || cfg.shared() != 16500 {
		t.Errorf("--replicas 64: reserve %d, shared %d, err %v; want 50 (400/64 × 1.8 rounded up) and 16500", cfg.reserve(), cfg.shared(), err)
	}
	for _, args := range [][]string{
		{"--store", "etcd"}, {"--replicas", "0"}, {"--replicas", "65"}, {"--reserved", "5000"}, {"--reserved", "-2"},
		{"--log-format", "xml"}, {"--duration", "10ms"}, {"--cost", "0"}, {"--headroom", "20000"}, {"extra"},
		{"--interactive-rate", "-1"}, {"--interactive-writes", "1.5"}, {"--read-ru", "0"}, {"--max-interval", "-1s"},
		{"--store", "azure"}, {"--store", "azure", "--azure-account", "a"}, // no key, no connection string
		// Malformed or out-of-range numbers are refused, not cut to what
		// parses (20000abc was 20000, 10.5 was 10, 4294967296 was 0).
		{"--budget", "20000abc"}, {"--cost", "10.5"}, {"--batch", "10x"}, {"--budget", "2e4"},
		{"--budget", "4294967296"}, {"--reserved", "4294967296"}, {"--headroom", "4294967296"}, {"--headroom", "-7"},
	} {
		if _, err := parseFlags(args, &bytes.Buffer{}); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
}
