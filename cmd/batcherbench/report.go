package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"
)

// Statuses of a result row.
const (
	statusMet     = "met"     // the goal is met
	statusMissed  = "MISSED"  // the goal is missed; upper case so it stands out
	statusInfo    = "info"    // a measurement without a goal
	statusSkipped = "skipped" // not run: a store is not configured
	statusError   = "error"   // could not run
)

// result is one row of the report.
type result struct {
	Scenario  string             `json:"scenario"`
	Case      string             `json:"case"`
	Store     string             `json:"store,omitempty"`
	Ours      string             `json:"ours"`
	Peer      string             `json:"peer,omitempty"`
	GoBatcher string             `json:"go_batcher_v1_8_0,omitempty"`
	Goal      string             `json:"goal,omitempty"`
	Status    string             `json:"status"`
	Note      string             `json:"note,omitempty"`
	Values    map[string]float64 `json:"values,omitempty"`
}

// report collects the rows of a run; add is safe for concurrent use.
type report struct {
	mu       sync.Mutex
	Mode     string    `json:"mode"`
	Started  time.Time `json:"started"`
	Seconds  float64   `json:"seconds"`
	Go       string    `json:"go"`
	CPUs     int       `json:"cpus"`
	Host     string    `json:"host,omitempty"`
	LoadAvg  string    `json:"loadavg_at_start,omitempty"`
	CI       bool      `json:"ci"`
	Results  []result  `json:"results"`
	Tables   []table   `json:"tables,omitempty"`
	finished time.Time
}

// table is a table of its own after the results, for a scenario that
// measures more per case than one row can show.
type table struct {
	Title  string     `json:"title"`
	Header []string   `json:"header"`
	Rows   [][]string `json:"rows"`
}

func newReport(opts options) *report {
	mode := "full"
	if opts.quick {
		mode = "quick"
	}
	host, _ := os.Hostname()
	return &report{
		Mode: mode, Started: time.Now(), Go: runtime.Version(), CPUs: runtime.NumCPU(),
		Host: host, LoadAvg: loadAvg(), CI: opts.ci,
	}
}

// loadAvg returns the first three fields of /proc/loadavg, or "" elsewhere.
func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func (r *report) add(rows ...result) {
	r.mu.Lock()
	r.Results = append(r.Results, rows...)
	r.mu.Unlock()
}

// addTable appends t to the report's tables; it is safe for concurrent use.
func (r *report) addTable(t table) {
	r.mu.Lock()
	r.Tables = append(r.Tables, t)
	r.mu.Unlock()
}

func (r *report) finish() {
	r.finished = time.Now()
	r.Seconds = r.finished.Sub(r.Started).Seconds()
}

// errors returns the number of rows that could not run.
func (r *report) errors() int {
	n := 0
	for _, row := range r.Results {
		if row.Status == statusError {
			n++
		}
	}
	return n
}

func (r *report) write(w io.Writer, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "## batcherbench, %s mode\n\n", r.Mode)
	fmt.Fprintf(&sb, "%s, %s, %d CPUs, load average at start %s, %.0f s in all.\n\n",
		r.Started.Format(time.RFC3339), r.Go, r.CPUs, r.LoadAvg, r.Seconds)
	sb.WriteString("| scenario | case | store | ours | peer, same run | go-batcher v1.8.0 | goal | status |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, row := range r.Results {
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s | %s | %s | %s |\n",
			cell(row.Scenario), cell(row.Case), cell(row.Store), cell(row.Ours), cell(row.Peer),
			cell(row.GoBatcher), cell(row.Goal), cell(row.Status))
	}
	for _, t := range r.Tables {
		writeTable(&sb, t)
	}
	notes := r.notes()
	if len(notes) > 0 {
		sb.WriteString("\nNotes:\n\n")
		for _, n := range notes {
			sb.WriteString("- " + n + "\n")
		}
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

// writeTable writes t in Markdown.
func writeTable(sb *strings.Builder, t table) {
	fmt.Fprintf(sb, "\n### %s\n\n", t.Title)
	cells := func(row []string) {
		sb.WriteString("|")
		for _, c := range row {
			sb.WriteString(" " + cell(c) + " |")
		}
		sb.WriteString("\n")
	}
	cells(t.Header)
	sb.WriteString(strings.Repeat("|---", len(t.Header)) + "|\n")
	for _, row := range t.Rows {
		cells(row)
	}
}

// notes lists the rows' notes, each prefixed with the row it belongs to.
func (r *report) notes() []string {
	var out []string
	for _, row := range r.Results {
		if row.Note == "" {
			continue
		}
		where := row.Scenario + ", " + row.Case
		if row.Store != "" {
			where += ", " + row.Store
		}
		out = append(out, where+": "+row.Note)
	}
	return out
}

// cell makes s safe inside a Markdown table cell.
func cell(s string) string {
	if s == "" {
		return "–"
	}
	return strings.ReplaceAll(s, "|", "\\|")
}

// verdict returns statusMet when ok, statusMissed otherwise.
func verdict(ok bool) string {
	if ok {
		return statusMet
	}
	return statusMissed
}

// fmtRate formats operations per second compactly.
func fmtRate(opsPerSec float64) string {
	switch {
	case opsPerSec >= 1e6:
		return fmt.Sprintf("%.2fM ops/s", opsPerSec/1e6)
	case opsPerSec >= 1e3:
		return fmt.Sprintf("%.0fk ops/s", opsPerSec/1e3)
	}
	return fmt.Sprintf("%.0f ops/s", opsPerSec)
}

// fmtDur formats a duration with a precision that suits its size.
func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// fmtPct formats a fraction as a percentage.
func fmtPct(f float64) string {
	return fmt.Sprintf("%.1f%%", 100*f)
}
