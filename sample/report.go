package main

import (
	"fmt"
	"html"
	"os"
	"strings"
	"time"
)

// reportStyle is the page's only styling; the report loads nothing from
// the network (no scripts, fonts or images) so it opens anywhere.
const reportStyle = `body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:880px;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border-bottom:1px solid #ddd;padding:4px 10px;text-align:left;font-size:14px}
th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}
svg{display:block;margin:.5em 0 1.5em}svg text{font-size:12px;fill:#333}svg .title{font-size:14px;font-weight:600}
svg .grid{stroke:#e4e4e4}svg .budget{stroke:#c00;stroke-width:1.5;stroke-dasharray:6 4}svg .budget-label{fill:#c00}
svg .mark{fill:#c00;font-size:11px}p.note{color:#555;font-size:14px}`

// writeReport writes the HTML report of runs to path.
func writeReport(path string, cfg config, runs []*runResult) error {
	return os.WriteFile(path, []byte(reportHTML(cfg, runs, time.Now())), 0o644)
}

// reportHTML returns the whole report page.
func reportHTML(cfg config, runs []*runResult, at time.Time) string {
	var b strings.Builder
	b.WriteString("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n")
	b.WriteString("<title>batcher sample: sharing a datastore budget</title>\n<style>" + reportStyle + "</style></head><body>\n")
	fmt.Fprintf(&b, "<h1>%d replicas sharing a %s RU/s datastore</h1>\n", cfg.replicas, num(uint64(cfg.budget)))
	fmt.Fprintf(&b, `<p class="note">Generated %s. Each replica reserves %s RU/s and %s RU/s are shared in %d partitions of %s RU/s, leased through the %s store; %s RU/s of the budget are left as headroom for the datastore's one-second windows (see the sample's README). Records cost %s RU and are written %d to a request. The load is sized for %s at the full budget. Without the library each replica sends %d requests at a time and, like the Cosmos DB SDKs, retries a 429 after its retry-after.</p>`+"\n",
		at.Format(time.RFC1123), num(uint64(cfg.reserve())), num(uint64(cfg.shared())), (cfg.shared()+cfg.factor-1)/cfg.factor,
		num(uint64(cfg.factor)), html.EscapeString(cfg.store), num(uint64(cfg.budget-uint32(cfg.replicas)*cfg.reserve()-cfg.shared())), num(uint64(cfg.cost)), cfg.batch, cfg.duration, cfg.workers)
	b.WriteString("<h2>Summary</h2>\n")
	writeTable(&b, summaryRows(runs))
	yMax := float64(cfg.budget) * 1.15
	for _, r := range runs {
		for _, s := range r.Seconds {
			yMax = max(yMax, float64(sum(s.RU)+sum(s.ThrottledRU))*1.05)
		}
	}
	for _, r := range runs {
		writeRun(&b, r, yMax)
	}
	b.WriteString("</body></html>\n")
	return b.String()
}

// writeRun writes one run's charts and job table.
func writeRun(b *strings.Builder, r *runResult, yMax float64) {
	fmt.Fprintf(b, "<h2>%s</h2>\n", html.EscapeString(capitalise(r.label())))
	ru := perReplica(r, func(s second, i int) float64 { return float64(s.RU[i]) })
	c := newChart("RU/s accepted by the datastore, by replica", r.Names, ru, float64(r.Budget), yMax)
	c.marks = make([]uint64, len(r.Seconds))
	for k, s := range r.Seconds {
		c.marks[k] = sum(s.Throttled)
	}
	b.WriteString(c.stacked())
	if r.Library {
		held := perReplica(r, func(s second, i int) float64 { return s.Capacity[i] })
		b.WriteString(newChart("Capacity held by each replica, RU/s (reserved + leased partitions; mean over the second)",
			r.Names, held, float64(r.Budget), yMax).stacked())
	} else {
		asked := perReplica(r, func(s second, i int) float64 { return float64(s.RU[i] + s.ThrottledRU[i]) })
		b.WriteString(newChart("RU/s sent by each replica: accepted + refused with a 429 (nothing holds capacity)",
			r.Names, asked, float64(r.Budget), yMax).stacked())
	}
	queue := perReplica(r, func(s second, i int) float64 { return float64(s.Queue[i]) })
	b.WriteString(newChart("Records waiting in each replica, at the end of each second", r.Names, queue, 0,
		maxOf(queue)*1.1).lines())
	rows := [][]string{{"job", "replica", "records", "sent at", "answered after", "429s", "failed"}}
	for _, o := range r.Jobs {
		answered := secs(o.Latency)
		if o.Err != "" {
			answered = "error: " + o.Err
		}
		rows = append(rows, []string{o.Spec.Name, r.Names[o.Spec.Replica], num(uint64(o.Spec.Records)), secs(o.Spec.At),
			answered, num(uint64(o.Result.Throttled)), num(uint64(o.Result.Failed))})
	}
	writeTable(b, rows)
}

// perReplica returns f for every replica and second of r.
func perReplica(r *runResult, f func(s second, i int) float64) [][]float64 {
	out := make([][]float64, len(r.Names))
	for i := range r.Names {
		for _, s := range r.Seconds {
			out[i] = append(out[i], f(s, i))
		}
	}
	return out
}

// writeTable writes rows as an HTML table, the first row as its header.
func writeTable(b *strings.Builder, rows [][]string) {
	b.WriteString("<table>\n")
	for i, row := range rows {
		b.WriteString("<tr>")
		for _, cell := range row {
			tag := "td"
			if i == 0 {
				tag = "th"
			}
			fmt.Fprintf(b, "<%s>%s</%s>", tag, html.EscapeString(cell), tag)
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString("</table>\n")
}

func maxOf(vs [][]float64) float64 {
	m := 0.0
	for _, v := range vs {
		for _, x := range v {
			m = max(m, x)
		}
	}
	return m
}

// niceCeil rounds v up to a multiple of a nice step, at least 1.
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	step := niceStep(v / 5)
	return step * float64(int(v/step+0.999))
}

func capitalise(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
