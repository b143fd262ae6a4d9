package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/internal/fairness"
)

// rampAndAlone measures the ramp of a lone instance from nothing to every
// partition (plan.rampRuns times, a fresh instance each time, the median
// reported), then keeps the last one at full demand for plan.aloneRun more
// and measures the share of that time at full capacity. An idle
// instance (demand zero) runs beside it throughout, to count its storage
// calls.
func (b *bench) rampAndAlone(ctx context.Context, ns *namespace) ([]result, error) {
	idle, err := startInstance(ctx, ns)
	if err != nil {
		return nil, err
	}
	defer idle.Stop()
	idle.GiveMe(0)
	idleStart, idleCalls := time.Now(), idle.Stats().StorageCalls

	var ramps []time.Duration
	var last *instance
	for i := 0; i < b.plan.rampRuns; i++ {
		in, err := startInstance(ctx, ns)
		if err != nil {
			return nil, err
		}
		defer in.Stop()
		in.GiveMe(sharedCap)
		d, ok := waitFor(ctx, b.plan.waitLimit, full(in))
		if !ok {
			d = -1
		}
		ramps = append(ramps, d)
		if i < b.plan.rampRuns-1 {
			in.Stop()
		}
		last = in
	}
	share := timeAtFull(ctx, last, b.plan.aloneRun)
	idleDur, idleN := time.Since(idleStart), idle.Stats().StorageCalls-idleCalls
	rows := []result{rampRow(ramps), b.aloneRow(last, share)}
	rows[0].Note = joinNotes(rows[0].Note, errorNote(last))
	idleRate := perMinute(idleN, idleDur)
	rows = append(rows, result{
		Case: "idle instance (no demand, nothing held): storage calls", Ours: fmt.Sprintf("%.1f/min", idleRate),
		GoBatcher: "0/min", Goal: "0/min", Status: verdict(idleN == 0),
		Values: map[string]float64{"calls_per_min": idleRate, "calls": float64(idleN), "seconds": idleDur.Seconds()},
		Note:   joinNotes(fmt.Sprintf("%d calls over %.0f s beside busy instances", idleN, idleDur.Seconds()), errorNote(idle)),
	})
	return rows, nil
}

// rampRow reports the ramps; a negative duration is one that never ended.
func rampRow(ramps []time.Duration) result {
	var xs []float64
	var runs []string
	ok := true
	for _, d := range ramps {
		if d < 0 {
			ok = false
			runs = append(runs, "never")
			continue
		}
		xs = append(xs, d.Seconds())
		runs = append(runs, fmtDur(d))
	}
	row := result{
		Case: "ramp: one instance from 0 to all 20 partitions", GoBatcher: "5.8 s median", Goal: "≤ 1 s",
		Values: map[string]float64{"runs": float64(len(ramps))},
	}
	if !ok || len(xs) == 0 {
		row.Ours, row.Status = "did not reach every partition: "+strings.Join(runs, ", "), statusMissed
		return row
	}
	m := median(xs)
	row.Values["median_s"] = m
	row.Ours = fmt.Sprintf("median %s (runs: %s)", fmtDur(time.Duration(m*float64(time.Second))), strings.Join(runs, ", "))
	row.Status = verdict(m <= 1)
	return row
}

// timeAtFull samples in's capacity every 10 ms for d and returns the share
// of the samples at full capacity.
func timeAtFull(ctx context.Context, in *instance, d time.Duration) float64 {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	end := time.Now().Add(d)
	var n, atFull int
	for time.Now().Before(end) && ctx.Err() == nil {
		<-t.C
		n++
		if in.Capacity() >= sharedCap {
			atFull++
		}
	}
	if n == 0 {
		return 0
	}
	return float64(atFull) / float64(n)
}

// aloneRow reports the share of time at full capacity.
func (b *bench) aloneRow(in *instance, share float64) result {
	st := in.Stats()
	return result{
		Case: "alone at full demand: share of time at full capacity", Ours: fmtPct(share),
		GoBatcher: "72% (leases lapse after 15 s and are re-won)", Goal: "≥ 99%", Status: verdict(share >= 0.99),
		Values: map[string]float64{"share": share, "seconds": b.plan.aloneRun.Seconds(),
			"renewals": float64(st.Renewals), "acquisitions": float64(st.Acquisitions)},
		Note: joinNotes(fmt.Sprintf("%.0f s after the ramp, sampled every 10 ms; leases of 15 s: %d renewals, %d acquisitions in all",
			b.plan.aloneRun.Seconds(), st.Renewals, st.Acquisitions), errorNote(in)),
	}
}

// fourSamples accumulates the capacity of each instance per window.
type fourSamples struct {
	sums      [][]float64 // [window][instance]
	counts    []int
	converged time.Duration // first time every instance held its share; -1 never
}

// fourInstances starts four instances that all demand everything and
// measures, over windows of plan.fourWindow after the warm-up, the capacity
// used and Jain's fairness index, and the storage calls each makes.
func (b *bench) fourInstances(ctx context.Context, ns *namespace) ([]result, error) {
	ins, err := startInstances(ctx, ns, 4)
	if err != nil {
		return nil, err
	}
	defer stopAll(ins)
	start := time.Now()
	for _, in := range ins {
		in.GiveMe(sharedCap)
	}
	var before []batcher.SharedStats
	samples := sampleFour(ctx, ins, start, b.plan, func() { before = statsOf(ins) })
	after := statsOf(ins)
	measured := time.Since(start) - b.plan.fourWarmup
	if len(samples.counts) <= b.plan.warmWindows() || before == nil {
		return nil, fmt.Errorf("four instances: run too short for a window after the warm-up")
	}
	rows := b.fourRows(samples)
	rows = append(rows, callsRow(before, after, measured))
	rows[2].Note = fmt.Sprintf("4 instances over %.0f s after the first %s; %s", measured.Seconds(), b.plan.fourWarmup, rows[2].Note)
	rows[0].Note = joinNotes(rows[0].Note, errorNote(ins...))
	return rows, nil
}

// sampleFour samples every instance's capacity every 50 ms for
// plan.fourRun, calling mark once the warm-up has passed.
func sampleFour(ctx context.Context, ins []*instance, start time.Time, p plan, mark func()) fourSamples {
	n := int(p.fourRun / p.fourWindow)
	s := fourSamples{sums: make([][]float64, n), counts: make([]int, n), converged: -1}
	for w := range s.sums {
		s.sums[w] = make([]float64, len(ins))
	}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	marked := false
	for ctx.Err() == nil {
		<-t.C
		el := time.Since(start)
		w := int(el / p.fourWindow)
		if w >= n {
			break
		}
		if w >= p.warmWindows() && !marked {
			mark()
			marked = true
		}
		fair := true
		for i, in := range ins {
			c := in.Capacity()
			s.sums[w][i] += float64(c)
			fair = fair && c == sharedCap/uint32(len(ins))
		}
		s.counts[w]++
		if fair && s.converged < 0 {
			s.converged = el
		}
	}
	return s
}

func statsOf(ins []*instance) []batcher.SharedStats {
	out := make([]batcher.SharedStats, len(ins))
	for i, in := range ins {
		out[i] = in.Stats()
	}
	return out
}

// fourRows reports utilisation and fairness over the windows after the
// warm-up.
func (b *bench) fourRows(s fourSamples) []result {
	minJain, minUse, sumUse, n := 1.0, 1.0, 0.0, 0
	for w := b.plan.warmWindows(); w < len(s.counts); w++ {
		if s.counts[w] == 0 {
			continue
		}
		var total float64
		for _, x := range s.sums[w] {
			total += x
		}
		use := total / float64(s.counts[w]) / sharedCap
		minUse, sumUse, n = min(minUse, use), sumUse+use, n+1
		minJain = min(minJain, fairness.Jain(s.sums[w]))
	}
	use := sumUse / float64(max(n, 1))
	win := b.plan.fourWindow.String()
	conv := "never held 5 partitions each at once"
	if s.converged >= 0 {
		conv = "first held 5 partitions each " + fmtDur(s.converged) + " after demand began"
	}
	return []result{{
		Case: "4 instances demanding everything: capacity used", Ours: fmt.Sprintf("%s (min window %s)", fmtPct(use), fmtPct(minUse)),
		GoBatcher: "92.6%", Goal: "≥ 99%", Status: verdict(use >= 0.99),
		Values: map[string]float64{"used": use, "min_window_used": minUse, "windows": float64(n), "converged_s": s.converged.Seconds()},
		Note:   fmt.Sprintf("mean over %d windows of %s after the first %s; %s", n, win, b.plan.fourWarmup, conv),
	}, {
		Case: fmt.Sprintf("4 instances: Jain fairness index over %s windows, min after the first %s", win, b.plan.fourWarmup), Ours: fmt.Sprintf("%.3f", minJain),
		GoBatcher: "0.72 (median of 3 runs; 0.90 best)", Goal: "≥ 0.99 after the first 5 s", Status: verdict(minJain >= 0.99),
		Values: map[string]float64{"min_jain": minJain, "windows": float64(n)},
		Note:   b.windowNote(),
	}}
}

// windowNote explains windows shorter than the 5 s in quick mode.
func (b *bench) windowNote() string {
	if b.plan.fourWindow < 5*time.Second {
		return fmt.Sprintf("quick mode: %s windows after the first %s instead of 5 s windows after the first 5 s", b.plan.fourWindow, b.plan.fourWarmup)
	}
	return ""
}

// callsRow reports the storage calls per instance per minute at full
// contention, and the share that failed.
func callsRow(before, after []batcher.SharedStats, d time.Duration) result {
	var calls, fails uint64
	var most float64
	for i := range after {
		c := after[i].StorageCalls - before[i].StorageCalls
		calls += c
		fails += after[i].StorageFailures - before[i].StorageFailures
		most = max(most, perMinute(c, d))
	}
	rate := perMinute(calls, d) / float64(len(after))
	failed := 0.0
	if calls > 0 {
		failed = float64(fails) / float64(calls)
	}
	return result{
		Case: "storage calls per instance at full contention", Ours: fmt.Sprintf("%.0f/min, %s failed", rate, fmtPct(failed)),
		GoBatcher: "~240/min, 90% failed (409s)", Goal: "≤ 120/min, < 10% failed", Status: verdict(rate <= 120 && failed < 0.10),
		Values: map[string]float64{"calls_per_min": rate, "max_instance_calls_per_min": most, "failed_share": failed},
		Note:   fmt.Sprintf("the busiest made %.0f/min", most),
	}
}
