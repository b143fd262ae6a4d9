// Command batcherbench runs the scenario benchmarks of the batcher module
// and prints what it measured beside go-batcher v1.8.0's published figures,
// the goals of the project, and the peers a user would otherwise pick
// (google.golang.org/api/support/bundler, golang.org/x/time/rate) measured
// in the same run, so that ratios hold on whatever machine runs it.
//
// It is a module of its own, so that its peers stay out of the main go.mod;
// from the repository's root:
//
//	go run -C cmd/batcherbench . [--quick] [--json] [--scenarios throughput,rate,latency,fair,shared,stall,wipe,scale] [--stores memory,azurite,redis]
//	go run -C cmd/batcherbench . --scenarios scale [--scale-n 4,16,64,128] [--scale-p 20,100,500] [--scale-steady 20s] [--scale-churn 30s] [--stores ...]
//	go run -C cmd/batcherbench . --scenarios hotkeys [--hotkeys-redis host:port] [--hotkeys-algorithms token_bucket,gcra,fixed_window] [--hotkeys-keys 100000] [--hotkeys-only mix|onekey] [--hotkeys-p99-pairs 2]
//
// The hotkeys scenario runs keyed limits (limit/redislimit) in worker
// processes on one Redis, with and without Options.LocalAllowance, beside
// the memory store (hotkeys.go); it starts its own redis-server unless
// --hotkeys-redis names one, and fails when any key admitted more than its
// limit. Its mix's p99 verdict pools pairs of runs with allowances and
// with the memory store, measured in alternating order (--hotkeys-p99-pairs,
// 2 by default), so that the machine's drift between runs weighs on both.
// Without --quick it takes about 15 minutes and runs when named.
//
// Every scenario runs by default, except scale and hotkeys without --quick: scale's whole
// grid (N instances in one process × P partitions) takes about 13 minutes
// per store, so it runs when asked for; --scale-n and --scale-p pick a
// part of the grid, --scale-steady and --scale-churn the length of its
// phases. Under --quick it runs one small cell, N=16 and P=20 on the memory
// store, in about ten seconds.
//
// The shared-capacity scenarios run against the in-process memory store and,
// when their environment variables are set, against Azurite
// (BATCHER_AZURITE_URL) and Redis (BATCHER_REDIS_ADDR);
// `source scripts/lib/services.sh && services_start` starts both and sets
// them. A store that is not configured is reported as skipped, except under
// CI=true, where scripts/test starts the services and their absence is an
// error.
//
// Timings are measured with the real clock: this tool measures the real
// thing, unlike the unit tests. A missed goal is reported in the table but
// does not change the exit status; the status is non-zero only when a
// scenario could not run (an API or storage error, a missing store in CI).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"
)

// scenarioNames lists the scenarios in the order they run.
var scenarioNames = []string{"throughput", "rate", "latency", "fair", "shared", "stall", "wipe", "scale", "hotkeys"}

// longScenarios are left out of a full run unless named with --scenarios.
var longScenarios = []string{"scale", "hotkeys"}

// storeNames lists the coordination stores of the shared scenarios.
// azurite-table is Azurite with the lease table layout
// (azureblob.TableLeaseManager); it runs only when named.
var storeNames = []string{"memory", "azurite", "azurite-table", "redis"}

// defaultStores are the stores run when --stores is not given.
var defaultStores = []string{"memory", "azurite", "redis"}

// options are the command-line settings.
type options struct {
	quick     bool
	json      bool
	scenarios []string
	stores    []string
	ci        bool

	// The scale scenario's grid and phases when set on the command line;
	// nil or zero leaves the plan's.
	scaleNs, scalePs        []int
	scaleSteady, scaleChurn time.Duration

	hotRedis string // the hotkeys scenario's Redis; empty: it starts its own
	hotAlgs  []string
	hotKeys  int           // 0: the plan's
	hotOnly  string        // "mix" or "onekey": that part of the hotkeys scenario alone; empty: both
	hotCold  time.Duration // hotkeys: Options.ColdLease of the "on" stores; 0: off
	hotWarm  time.Duration // hotkeys: the mix's warm-up; 0: the plan's
	hotPairs int           // hotkeys: the p99 verdict's pairs of runs; 0: the plan's
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == stallChildArg {
		os.Exit(runStallChild(os.Stdout))
	}
	if len(os.Args) == 3 && os.Args[1] == hotChildArg {
		os.Exit(runHotChild(os.Args[2], os.Stdout))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run parses args, runs the chosen scenarios, writes the report to stdout
// and progress to stderr, and returns the exit status: 0 when every
// scenario ran, 1 when one failed to run, 2 for bad flags.
func run(args []string, stdout, stderr io.Writer) int {
	opts, err := parseFlags(args, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "batcherbench:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep := newReport(opts)
	b := &bench{opts: opts, plan: opts.withOverrides(planFor(opts.quick)), log: stderr, rep: rep}
	for _, name := range opts.scenarios {
		if ctx.Err() != nil {
			break
		}
		b.logf("== %s", name)
		b.runScenario(ctx, name)
	}
	rep.finish()
	if err := rep.write(stdout, opts.json); err != nil {
		fmt.Fprintln(stderr, "batcherbench:", err)
		return 1
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "batcherbench: interrupted")
		return 1
	}
	if n := rep.errors(); n > 0 {
		fmt.Fprintf(stderr, "batcherbench: %d scenario(s) could not run; see the rows marked error\n", n)
		return 1
	}
	return 0
}

// parseFlags reads the command line.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("batcherbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "run every scenario for seconds only (CI mode); the figures are indicative")
	asJSON := fs.Bool("json", false, "print JSON instead of a Markdown table")
	scen := fs.String("scenarios", "", "comma-separated scenarios to run: "+strings.Join(scenarioNames, ", ")+" (default: all; all but scale without --quick)")
	stores := fs.String("stores", strings.Join(defaultStores, ","), "comma-separated stores for the shared scenarios: "+strings.Join(storeNames, ", "))
	scaleN := fs.String("scale-n", "", "scale: comma-separated instance counts (default 4,16,64,128; 16 with --quick)")
	scaleP := fs.String("scale-p", "", "scale: comma-separated partition counts, 1 to 500 (default 20,100,500; 20 with --quick)")
	scaleSteady := fs.Duration("scale-steady", 0, "scale: measured time after convergence (default 20s, 70s when N > P; 4s and 6s with --quick)")
	scaleChurn := fs.Duration("scale-churn", 0, "scale: length of the churn phase, a change every 10 s (default 30s; 4s with --quick, a change every 2 s)")
	hotRedis := fs.String("hotkeys-redis", "", "hotkeys: the Redis to use (host:port); default: a redis-server started for the scenario")
	hotAlgs := fs.String("hotkeys-algorithms", "", "hotkeys: comma-separated algorithms: token_bucket, gcra, fixed_window (default: all three; token_bucket with --quick)")
	hotKeys := fs.Int("hotkeys-keys", 0, "hotkeys: distinct keys of the Zipf draw, at least 100 (default 100000)")
	hotOnly := fs.String("hotkeys-only", "", "hotkeys: run one part only: mix (the Zipf mix) or onekey (one key at 10× its limit); default: both")
	hotCold := fs.Duration("hotkeys-cold-lease", time.Minute, "hotkeys: redislimit Options.ColdLease of the stores with allowances; 0: hot keys only")
	hotWarm := fs.Duration("hotkeys-warmup", 0, "hotkeys: the mix's warm-up before each measured run (default 30s: the stores with cold leases reach their steady state; 1.5s with --quick)")
	hotPairs := fs.Int("hotkeys-p99-pairs", 0, "hotkeys: pairs of runs (allowances on, memory store) the mix's p99 verdict pools, measured in alternating order (default 2; 1 with --quick)")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	opts := options{quick: *quick, json: *asJSON, ci: os.Getenv("CI") == "true", scaleSteady: *scaleSteady, scaleChurn: *scaleChurn,
		hotRedis: *hotRedis}
	var err error
	if *scen == "" {
		*scen = strings.Join(defaultScenarios(opts.quick), ",")
	}
	if opts.scenarios, err = pickList(*scen, scenarioNames, "scenario"); err != nil {
		return options{}, err
	}
	if opts.stores, err = pickList(*stores, storeNames, "store"); err != nil {
		return options{}, err
	}
	if opts.scaleNs, err = intList(*scaleN, 1, 1024, "--scale-n"); err != nil {
		return options{}, err
	}
	if opts.scalePs, err = intList(*scaleP, 1, 500, "--scale-p"); err != nil {
		return options{}, err
	}
	if *hotKeys != 0 && (*hotKeys < 100 || *hotKeys > 10_000_000) {
		return options{}, fmt.Errorf("--hotkeys-keys: %d is not a whole number from 100 to 10000000", *hotKeys)
	}
	opts.hotKeys = *hotKeys
	if *hotOnly != "" && *hotOnly != "mix" && *hotOnly != "onekey" {
		return options{}, fmt.Errorf("--hotkeys-only: %q is neither mix nor onekey", *hotOnly)
	}
	opts.hotOnly = *hotOnly
	if *hotCold != 0 && (*hotCold < time.Second || *hotCold > time.Hour) {
		return options{}, fmt.Errorf("--hotkeys-cold-lease: %v is neither 0 nor from 1s to 1h", *hotCold)
	}
	if *hotWarm < 0 {
		return options{}, fmt.Errorf("--hotkeys-warmup: %v is negative", *hotWarm)
	}
	opts.hotCold, opts.hotWarm = *hotCold, *hotWarm
	if *hotPairs < 0 || *hotPairs > 20 {
		return options{}, fmt.Errorf("--hotkeys-p99-pairs: %d is not from 1 to 20", *hotPairs)
	}
	opts.hotPairs = *hotPairs
	if *hotAlgs != "" {
		if opts.hotAlgs, err = pickList(*hotAlgs, []string{"token_bucket", "gcra", "fixed_window"}, "algorithm"); err != nil {
			return options{}, err
		}
	}
	if opts.scaleSteady < 0 || opts.scaleChurn < 0 {
		return options{}, fmt.Errorf("--scale-steady and --scale-churn cannot be negative")
	}
	return opts, nil
}

// defaultScenarios returns the scenarios run when none are named: all of
// them under --quick, all but the long ones otherwise.
func defaultScenarios(quick bool) []string {
	if quick {
		return scenarioNames
	}
	var out []string
	for _, s := range scenarioNames {
		if !slices.Contains(longScenarios, s) {
			out = append(out, s)
		}
	}
	return out
}

// intList parses a comma-separated list of integers in [lo, hi]; an empty
// list is nil.
func intList(list string, lo, hi int, flagName string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < lo || n > hi {
			return nil, fmt.Errorf("%s: %q is not a whole number from %d to %d", flagName, f, lo, hi)
		}
		out = append(out, n)
	}
	return out, nil
}

// withOverrides returns p with the scale settings given on the command
// line.
func (o options) withOverrides(p plan) plan {
	if o.scaleNs != nil {
		p.scale.ns = o.scaleNs
	}
	if o.scalePs != nil {
		p.scale.ps = o.scalePs
	}
	if o.scaleSteady > 0 {
		p.scale.steady, p.scale.wideSteady = o.scaleSteady, o.scaleSteady
	}
	if o.scaleChurn > 0 {
		p.scale.churn = o.scaleChurn
	}
	return p
}

// pickList splits a comma-separated list, checks each name against known
// and returns them in the order of known.
func pickList(list string, known []string, what string) ([]string, error) {
	var picked []string
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !slices.Contains(known, s) {
			return nil, fmt.Errorf("unknown %s %q (known: %s)", what, s, strings.Join(known, ", "))
		}
		picked = append(picked, s)
	}
	if len(picked) == 0 {
		return nil, fmt.Errorf("no %s chosen", what)
	}
	var ordered []string
	for _, k := range known {
		if slices.Contains(picked, k) {
			ordered = append(ordered, k)
		}
	}
	return ordered, nil
}

// bench carries what every scenario needs.
type bench struct {
	opts options
	plan plan
	log  io.Writer
	rep  *report
}

// logf writes a progress line to stderr, so stdout stays a clean report.
func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// runScenario runs one named scenario, turning a panic into an error row so
// that one broken scenario does not hide the others' results.
func (b *bench) runScenario(ctx context.Context, name string) {
	defer func() {
		if r := recover(); r != nil {
			b.rep.add(result{Scenario: name, Case: "(all)", Status: statusError, Note: fmt.Sprintf("panic: %v", r)})
		}
	}()
	switch name {
	case "throughput":
		b.throughput(ctx)
	case "rate":
		b.rateAccuracy(ctx)
	case "latency":
		b.latency(ctx)
	case "fair":
		b.fairRelease(ctx)
	case "shared":
		b.sharedCapacity(ctx)
	case "stall":
		b.stall(ctx)
	case "wipe":
		b.wipe(ctx)
	case "scale":
		b.scale(ctx)
	case "hotkeys":
		b.hotkeys(ctx)
	}
}
