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
	Label   string
	Elapsed time.Duration // the bulk jobs: first sent to last answered
	BulkRU  uint64
	// RoomUtil is the bulk jobs' RU against the room the user requests
	// left (the budget less their RU, window by window) over the whole run,
	// from the first job sent to the last answer; RoomSeconds is its length.
	RoomUtil    float64
	RoomSeconds float64
	// BusyUtil is the share of the budget used (bulk and users) in the
	// windows where every replica had a backlog all the window; BusySeconds
	// counts them.
	BusyUtil    float64
	BusySeconds int
	Requests    uint64 // datastore requests, accepted or throttled
	Throttled   uint64 // 429s in all
	ThrottledRU uint64
	Failed      uint64 // bulk records given up on
	Users       userStats
}

// summarise computes r's headline numbers.
func summarise(r *runResult) summary {
	s := summary{Label: r.label(), Elapsed: r.Elapsed, BulkRU: r.Total.bulkRU(),
		Requests: r.Total.Requests + r.Total.Throttled, Throttled: r.Total.Throttled,
		ThrottledRU: r.Total.ThrottledRU, Failed: r.Failed, Users: statsOf(r.Users)}
	var busyRU, room float64
	for _, sec := range r.Seconds {
		lo := max(time.Duration(sec.K)*time.Second, r.From)
		hi := min(time.Duration(sec.K+1)*time.Second, r.To)
		if hi > lo {
			room += (hi - lo).Seconds() * (float64(r.Budget) - float64(sum(sec.UserRU)))
		}
		if !sec.Partial && count(sec.Backlog) == len(sec.Backlog) {
			busyRU += float64(sum(sec.RU))
			s.BusySeconds++
		}
	}
	s.RoomSeconds = (r.To - r.From).Seconds()
	if room > 0 {
		s.RoomUtil = float64(s.BulkRU) / room
	}
	if s.BusySeconds > 0 {
		s.BusyUtil = busyRU / (float64(r.Budget) * float64(s.BusySeconds))
	}
	return s
}

// throttledShare returns the 429s as a share of the requests.
func (s summary) throttledShare() float64 {
	if s.Requests == 0 {
		return 0
	}
	return float64(s.Throttled) / float64(s.Requests)
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
	add("bulk: total time", func(s summary) string { return secs(s.Elapsed) })
	add("bulk: RU accepted", func(s summary) string { return num(s.BulkRU) })
	add("bulk: utilisation of the room users left, whole run", func(s summary) string {
		return fmt.Sprintf("%s over %.1f s", pct(s.RoomUtil), s.RoomSeconds)
	})
	add("budget used while every replica has a backlog", func(s summary) string {
		return fmt.Sprintf("%s over %d s", pct(s.BusyUtil), s.BusySeconds)
	})
	add("bulk: records lost", func(s summary) string { return num(s.Failed) })
	add("user requests", func(s summary) string { return num(uint64(s.Users.Requests)) })
	add("user requests throttled", func(s summary) string {
		return fmt.Sprintf("%s (%s × 429)", num(uint64(s.Users.Throttled)), num(uint64(s.Users.Retries)))
	})
	add("user requests failed", func(s summary) string { return num(uint64(s.Users.Failed)) })
	add("user latency p50 / p99 / max", func(s summary) string {
		return fmt.Sprintf("%s / %s / %s", ms(s.Users.P50), ms(s.Users.P99), ms(s.Users.Max))
	})
	add("user latency in the replica p99 / max", func(s summary) string {
		return fmt.Sprintf("%s / %s", ms(s.Users.ServedP99), ms(s.Users.ServedMax))
	})
	add("429s in all", func(s summary) string {
		return fmt.Sprintf("%s of %s requests (%.2f%%)", num(s.Throttled), num(s.Requests), 100*s.throttledShare())
	})
	add("RU refused with a 429", func(s summary) string { return num(s.ThrottledRU) })
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
