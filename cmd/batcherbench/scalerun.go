package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// scaleOutcome is what one cell of the scale grid measured.
type scaleOutcome struct {
	store      string
	n, p       int
	converged  time.Duration // -1: not within the limit
	steady     steadyFigures
	window     time.Duration // Jain window
	jainMin    float64
	jainOK     bool // at least one whole window
	listing    listingCost
	listingErr error
	settle     []time.Duration // per churn change; negative: did not settle
	lost       float64         // share of the churn phase's partition-seconds
	churned    bool
	samples    int
	violations int
	firstBad   string
	doubles    int // store grants of a partition granted to another
	errs       string
}

// scale runs the scale scenario on every chosen store; under --quick, on
// the memory store only.
func (b *bench) scale(ctx context.Context) {
	stores := b.opts.stores
	if b.opts.quick {
		stores = slices.DeleteFunc(slices.Clone(stores), func(s string) bool { return s != "memory" })
	}
	tbl := table{Title: "scale: N instances in one process sharing P partitions, each demanding all of them", Header: scaleHeader}
	for _, name := range stores {
		if ctx.Err() != nil {
			break
		}
		st, err := connectStore(ctx, name)
		if err != nil {
			b.storeUnavailable("scale", name, err)
			continue
		}
		var outs []scaleOutcome
		for _, p := range b.plan.scale.ps {
			for _, n := range b.plan.scale.ns {
				if ctx.Err() != nil {
					break
				}
				b.logf("scale on %s: N=%d P=%d", name, n, p)
				out, err := b.scaleCell(ctx, st, n, p)
				if err != nil {
					b.rep.add(result{Scenario: "scale", Case: scaleCase(n, p), Store: name, Status: statusError, Note: err.Error()})
					b.logf("scale on %s: N=%d P=%d: %v", name, n, p, err)
					continue
				}
				row := b.scaleRow(out)
				b.rep.add(row)
				tbl.Rows = append(tbl.Rows, scaleDetail(out, row.Status))
				b.logf("scale on %s: N=%d P=%d: %s (%s)", name, n, p, row.Ours, row.Status)
				outs = append(outs, out)
			}
		}
		b.rep.add(callGrowthRows(name, outs)...)
		st.shut()
	}
	if len(tbl.Rows) > 0 {
		b.rep.addTable(tbl)
	}
}

// scaleCase names a cell.
func scaleCase(n, p int) string {
	return fmt.Sprintf("N=%d instances (one process), P=%d partitions", n, p)
}

// scaleCell runs one cell in a namespace of its own.
func (b *bench) scaleCell(ctx context.Context, st *store, n, p int) (scaleOutcome, error) {
	ns, err := st.open(ctx)
	if err != nil {
		return scaleOutcome{}, err
	}
	defer ns.cleanup()
	r, err := startScaleRun(ctx, ns, n, p)
	if err != nil {
		return scaleOutcome{}, err
	}
	defer stopAll(r.ins)
	pl := b.plan.scale
	out := scaleOutcome{store: st.name, n: n, p: p}
	out.converged = r.converge(ctx, pl.convergeLimit)
	if ns.listing != nil {
		// A store overloaded by the instances' own listings may answer
		// slowly; the bytes are what is measured here, so wait long.
		lctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		began := time.Now()
		out.listing, out.listingErr = ns.listing(lctx, p)
		if out.listing.took == 0 {
			out.listing.took = time.Since(began)
		}
		cancel()
	}
	var steadyFor time.Duration
	steadyFor, out.window = pl.steadyFor(n, p)
	out.steady = r.steady(ctx, steadyFor, pl.bucket)
	out.jainMin, _, out.jainOK = jainRange(out.steady.log.windows(int(out.window/pl.bucket), 1))
	if pl.churn > 0 {
		rng := rand.New(rand.NewPCG(uint64(n), uint64(p)))
		var log *heldLog
		log, out.settle = r.churn(ctx, pl.churn, pl.churnEvery, rng)
		out.lost, out.churned = log.lostShare(), true
	}
	out.samples, out.violations, out.firstBad = r.samples, r.violations, r.firstViolation
	out.doubles, out.errs = r.led.storeDoubles(), errorNote(r.ins...)
	return out, ctx.Err()
}

// scaleGoal is one goal of a cell.
type scaleGoal struct {
	text string
	met  bool
}

// goals returns the goals of the cell and whether each is met.
func (o scaleOutcome) goals() []scaleGoal {
	wide := o.n > o.p
	var gs []scaleGoal
	if o.n == 128 && o.p == 500 {
		limit := 2 * time.Second
		if strings.HasPrefix(o.store, "azurite") {
			limit = 5 * time.Second
		}
		gs = append(gs, scaleGoal{"convergence ≤ " + fmtDur(limit), o.converged >= 0 && o.converged <= limit})
	} else {
		gs = append(gs, scaleGoal{"converges", o.converged >= 0})
	}
	use, jain := 0.99, 0.99
	if wide {
		use, jain = 0.97, 0.95
	}
	gs = append(gs,
		scaleGoal{"utilisation ≥ " + fmtPct(use), o.steady.log.use() >= use},
		scaleGoal{fmt.Sprintf("Jain ≥ %.2f over %s", jain, o.window), o.jainOK && o.jainMin >= jain},
		scaleGoal{"≤ 120 calls/instance/min", o.callsPerMin() <= 120},
	)
	if o.churned {
		gs = append(gs, scaleGoal{"lost ≤ 2% under churn", o.lost <= 0.02})
	}
	gs = append(gs, scaleGoal{"0 double-counting", o.violations == 0 && o.doubles == 0})
	return gs
}

// callsPerMin returns the storage calls per instance per minute of the
// steady phase.
func (o scaleOutcome) callsPerMin() float64 {
	return perMinute(o.steady.calls, o.steady.took) / float64(o.n)
}

// failedShare returns the share of the steady phase's calls that failed.
func (o scaleOutcome) failedShare() float64 {
	if o.steady.calls == 0 {
		return 0
	}
	return float64(o.steady.fails) / float64(o.steady.calls)
}

// cpuPerMin returns the process CPU time per instance per minute of the
// steady phase.
func (o scaleOutcome) cpuPerMin() time.Duration {
	if o.steady.took <= 0 {
		return 0
	}
	return time.Duration(float64(o.steady.cpu) / float64(o.n) / o.steady.took.Minutes())
}

// scaleRow is the cell's row of the report.
func (b *bench) scaleRow(o scaleOutcome) result {
	var goals, missed []string
	for _, g := range o.goals() {
		goals = append(goals, g.text)
		if !g.met {
			missed = append(missed, g.text)
		}
	}
	row := result{
		Scenario: "scale", Case: scaleCase(o.n, o.p), Store: o.store,
		Ours: fmt.Sprintf("converged %s; used %s; Jain %s; %.0f calls/instance/min; lost %s; %d double-counting",
			fmtConverged(o.converged), fmtPct(o.steady.log.use()), fmtJain(o), o.callsPerMin(), fmtLost(o), o.violations+o.doubles),
		Goal:   strings.Join(goals, "; "),
		Status: verdict(len(missed) == 0),
		Values: o.values(),
	}
	note := fmt.Sprintf("steady %s, churn %s; %d samples checked", fmtDur(o.steady.took), b.plan.scale.churn, o.samples)
	if len(missed) > 0 {
		note = "missed: " + strings.Join(missed, ", ") + "; " + note
	}
	if o.firstBad != "" {
		note += "; first double-counting: " + o.firstBad
	}
	if o.doubles > 0 {
		note += fmt.Sprintf("; the store granted a partition still granted to another %d time(s)", o.doubles)
	}
	if o.listingErr != nil {
		note += "; listing size not measured: " + o.listingErr.Error()
	}
	if b.opts.quick {
		note += fmt.Sprintf("; quick mode: %s windows, figures indicative", o.window)
	}
	row.Note = joinNotes(note, o.errs)
	return row
}

// values are the row's figures for --json.
func (o scaleOutcome) values() map[string]float64 {
	med, worst, unsettled := settleSummary(o.settle)
	return map[string]float64{
		"n": float64(o.n), "p": float64(o.p), "converged_s": o.converged.Seconds(),
		"used": o.steady.log.use(), "min_sample_used": o.steady.log.minUse, "jain_min": o.jainMin,
		"jain_window_s": o.window.Seconds(), "calls_per_instance_min": o.callsPerMin(),
		"busiest_calls_per_min": o.steady.busiest, "failed_share": o.failedShare(),
		"total_calls_per_min":     perMinute(o.steady.calls, o.steady.took),
		"cpu_ms_per_instance_min": float64(o.cpuPerMin()) / float64(time.Millisecond),
		"listing_bytes_received":  float64(o.listing.received), "listing_bytes_sent": float64(o.listing.sent),
		"churn_settle_median_s": med.Seconds(), "churn_settle_max_s": worst.Seconds(), "churn_unsettled": float64(unsettled),
		"churn_lost": o.lost, "violations": float64(o.violations), "store_doubles": float64(o.doubles),
		"samples": float64(o.samples), "steady_s": o.steady.took.Seconds(),
	}
}

// settleSummary returns the median and the longest of the settle times
// that settled, and how many did not.
func settleSummary(ds []time.Duration) (med, worst time.Duration, unsettled int) {
	var ok []time.Duration
	for _, d := range ds {
		if d < 0 {
			unsettled++
			continue
		}
		ok = append(ok, d)
	}
	if len(ok) == 0 {
		return 0, 0, unsettled
	}
	return percentile(ok, 50), slices.Max(ok), unsettled
}

// scaleHeader heads the scale scenario's own table.
var scaleHeader = []string{"store", "N", "P", "convergence", "used (lowest sample)", "Jain, lowest window",
	"calls/instance/min (failed)", "calls/min, all", "bytes per listing", "CPU/instance/min",
	"churn: settled after (median / max)", "churn: lost", "double-counting", "goals"}

// scaleDetail is the cell's row of the scale table.
func scaleDetail(o scaleOutcome, status string) []string {
	med, worst, unsettled := settleSummary(o.settle)
	churn := "–"
	if o.churned {
		churn = fmt.Sprintf("%s / %s", fmtDur(med), fmtDur(worst))
		if unsettled > 0 {
			churn += fmt.Sprintf(" (%d of %d not within %s)", unsettled, len(o.settle), "the period")
		}
	}
	return []string{
		o.store, fmt.Sprint(o.n), fmt.Sprint(o.p), fmtConverged(o.converged),
		fmt.Sprintf("%s (%s)", fmtPct(o.steady.log.use()), fmtPct(o.steady.log.minUse)),
		fmtJain(o) + " (" + o.window.String() + ")",
		fmt.Sprintf("%.0f (%s)", o.callsPerMin(), fmtPct(o.failedShare())),
		fmt.Sprintf("%.0f", perMinute(o.steady.calls, o.steady.took)),
		fmtListing(o), fmtDur(o.cpuPerMin()), churn, fmtLost(o),
		fmt.Sprintf("%d in %d samples", o.violations+o.doubles, o.samples), status,
	}
}

func fmtConverged(d time.Duration) string {
	if d < 0 {
		return "not within the limit"
	}
	return fmtDur(d)
}

func fmtJain(o scaleOutcome) string {
	if !o.jainOK {
		return "no whole window"
	}
	return fmt.Sprintf("%.3f", o.jainMin)
}

func fmtLost(o scaleOutcome) string {
	if !o.churned {
		return "–"
	}
	return fmtPct(o.lost)
}

// fmtListing formats the bytes of one listing.
func fmtListing(o scaleOutcome) string {
	switch {
	case o.listingErr != nil:
		return "not measured"
	case o.listing.how == "":
		return "–"
	case o.listing.sent > 0:
		return fmt.Sprintf("%s read, %s sent, in %s (%s)", fmtBytes(o.listing.received), fmtBytes(o.listing.sent), fmtDur(o.listing.took), o.listing.how)
	}
	return fmt.Sprintf("%s in %s (%s)", fmtBytes(o.listing.received), fmtDur(o.listing.took), o.listing.how)
}

// fmtBytes formats a byte count compactly.
func fmtBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// callGrowthRows report, for each P measured at more than one N, whether
// the storage calls per instance stay under 120 a minute and do not grow
// with N: the largest N may make at most a quarter more than the smallest.
func callGrowthRows(store string, outs []scaleOutcome) []result {
	byP := map[int][]scaleOutcome{}
	var ps []int
	for _, o := range outs {
		if _, ok := byP[o.p]; !ok {
			ps = append(ps, o.p)
		}
		byP[o.p] = append(byP[o.p], o)
	}
	var rows []result
	for _, p := range ps {
		cells := byP[p]
		if len(cells) < 2 {
			continue
		}
		slices.SortFunc(cells, func(a, b scaleOutcome) int { return a.n - b.n })
		var parts []string
		worst := 0.0
		for _, c := range cells {
			parts = append(parts, fmt.Sprintf("N=%d: %.0f (all: %.0f)", c.n, c.callsPerMin(), perMinute(c.steady.calls, c.steady.took)))
			worst = max(worst, c.callsPerMin())
		}
		first, last := cells[0].callsPerMin(), cells[len(cells)-1].callsPerMin()
		rows = append(rows, result{
			Scenario: "scale", Case: fmt.Sprintf("P=%d: storage calls per instance per minute as N grows (all instances in brackets)", p), Store: store,
			Ours: strings.Join(parts, ", "), Goal: "≤ 120 at every N, not growing with N (largest N ≤ 1.25 × smallest)",
			Status: verdict(worst <= 120 && last <= 1.25*first),
			Values: map[string]float64{"p": float64(p), "worst": worst, "smallest_n": first, "largest_n": last},
		})
	}
	return rows
}
