package main

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// summary is the headline numbers of one run.
type summary struct {
	Label       string
	Elapsed     time.Duration
	AcceptedRU  uint64
	Utilisation float64 // RU accepted / (budget × the windows the load spans)
	Windows     int
	// BusyUtil is the share of the budget used in the windows where every
	// replica had a backlog all the window; BusySeconds counts them.
	BusyUtil    float64
	BusySeconds int
	// SteadyUtil is the RU used against what could be used, in the windows
	// where each replica either had a backlog all the window or nothing at
	// all, at least one the former. With the library an idle replica's
	// reservation cannot be used by the others, so what could be used is the
	// budget less the idle replicas' reservations.
	SteadyUtil    float64
	SteadySeconds int
	Throttled     uint64
	ThrottledRU   uint64
	Failed        uint64
}

// summarise computes r's headline numbers.
func summarise(r *runResult) summary {
	s := summary{Label: r.label(), Elapsed: r.Elapsed, AcceptedRU: r.Total.AcceptedRU,
		Throttled: r.Total.Throttled, ThrottledRU: r.Total.ThrottledRU, Failed: r.Failed}
	if s.Windows = r.Windows; s.Windows > 0 {
		s.Utilisation = float64(r.Total.AcceptedRU) / (float64(r.Budget) * float64(s.Windows))
	}
	var busyRU, steadyRU, steadyCap float64
	for _, sec := range r.Seconds {
		if sec.Partial {
			continue
		}
		ru := float64(sum(sec.RU))
		backlogged, idle := count(sec.Backlog), count(sec.Idle)
		if backlogged == len(sec.Backlog) {
			busyRU += ru
			s.BusySeconds++
		}
		if backlogged > 0 && backlogged+idle == len(sec.Backlog) {
			steadyRU += ru
			steadyCap += float64(r.attainable(idle))
			s.SteadySeconds++
		}
	}
	if s.BusySeconds > 0 {
		s.BusyUtil = busyRU / (float64(r.Budget) * float64(s.BusySeconds))
	}
	if steadyCap > 0 {
		s.SteadyUtil = steadyRU / steadyCap
	}
	return s
}

// attainable returns the RU/s the busy replicas can use when idle replicas
// have nothing to do: without the library all of the budget, with it the
// budget less the idle replicas' reservations.
func (r *runResult) attainable(idle int) uint64 {
	if !r.Library {
		return r.Budget
	}
	return r.Budget - uint64(idle)*uint64(r.Reserved)
}

func sum(xs []uint64) uint64 {
	var t uint64
	for _, x := range xs {
		t += x
	}
	return t
}

func count(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// pct formats a ratio as a percentage.
func pct(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }

// secs formats a duration in seconds.
func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

// summaryRows returns the summary table of runs: a header row, then one row
// per measure with a column per run. The report uses the same rows.
func summaryRows(runs []*runResult) [][]string {
	rows := [][]string{{""}}
	ss := make([]summary, len(runs))
	for i, r := range runs {
		ss[i] = summarise(r)
		rows[0] = append(rows[0], ss[i].Label)
	}
	add := func(name string, f func(s summary) string) {
		row := []string{name}
		for _, s := range ss {
			row = append(row, f(s))
		}
		rows = append(rows, row)
	}
	add("total time", func(s summary) string { return secs(s.Elapsed) })
	add("RU accepted", func(s summary) string { return num(s.AcceptedRU) })
	add("utilisation of the budget, whole run", func(s summary) string {
		return fmt.Sprintf("%s over %d s", pct(s.Utilisation), s.Windows)
	})
	add("utilisation while every replica has a backlog", func(s summary) string {
		return fmt.Sprintf("%s over %d s", pct(s.BusyUtil), s.BusySeconds)
	})
	add("utilisation of what busy replicas can use", func(s summary) string {
		return fmt.Sprintf("%s over %d s", pct(s.SteadyUtil), s.SteadySeconds)
	})
	add("429 responses", func(s summary) string { return num(s.Throttled) })
	add("RU refused with a 429", func(s summary) string { return num(s.ThrottledRU) })
	add("records given up on", func(s summary) string { return num(s.Failed) })
	for j, o := range runs[0].Jobs {
		row := []string{fmt.Sprintf("job %s (%s, %s records, from %s)", o.Spec.Name,
			runs[0].Names[o.Spec.Replica], num(uint64(o.Spec.Records)), secs(o.Spec.At))}
		for _, r := range runs {
			row = append(row, jobCell(r.Jobs[j]))
		}
		rows = append(rows, row)
	}
	return rows
}

// jobCell describes a job's outcome in a table cell.
func jobCell(o jobOutcome) string {
	if o.Err != "" {
		return "error: " + o.Err
	}
	s := secs(o.Latency)
	if o.Result.Throttled > 0 {
		s += fmt.Sprintf(", %s × 429", num(uint64(o.Result.Throttled)))
	}
	if o.Result.Failed > 0 {
		s += fmt.Sprintf(", %s failed", num(uint64(o.Result.Failed)))
	}
	return s
}

// printSummary writes the summary table of runs, columns aligned.
func printSummary(w io.Writer, runs []*runResult) {
	rows := summaryRows(runs)
	rows[0][0] = "Summary"
	width := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, cell := range row {
			width[i] = max(width[i], utf8.RuneCountInString(cell))
		}
	}
	line := func(cells []string) {
		var b strings.Builder
		for i, cell := range cells {
			b.WriteString(cell + strings.Repeat(" ", width[i]-utf8.RuneCountInString(cell)))
			if i < len(cells)-1 {
				b.WriteString("   ")
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	line(rows[0])
	dashes := make([]string, len(width))
	for i, n := range width {
		dashes[i] = strings.Repeat("-", n)
	}
	line(dashes)
	for _, row := range rows[1:] {
		line(row)
	}
}
