package main

import (
	"fmt"
	"html"
	"os"
	"strconv"
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
svg .mark{fill:#c00;font-size:11px}p.note{color:#555;font-size:14px}p.outcome{font-size:17px;line-height:1.45}
pre{background:#f6f8fa;padding:10px 14px;font-size:13px;line-height:1.4;overflow-x:auto}h1{font-size:26px;line-height:1.3}
td.met{color:#176b21;font-weight:600}td.missed{color:#b00;font-weight:600}`

// writeReport writes the HTML report of runs to path.
func writeReport(path string, cfg config, runs []*runResult, cal calibration) error {
	page, err := reportHTML(cfg, runs, cal, time.Now())
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(page), 0o644)
}

// reportHTML returns the whole report page. It opens with the outcome, the
// library code the replicas run and the goals.
func reportHTML(cfg config, runs []*runResult, cal calibration, at time.Time) (string, error) {
	snippet, err := librarySnippet()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n")
	b.WriteString("<title>" + libraryPath + " sample: sharing a datastore budget</title>\n<style>" + reportStyle + "</style></head><body>\n")
	fmt.Fprintf(&b, "<h1>%s</h1>\n", html.EscapeString(headline(runs)))
	fmt.Fprintf(&b, "<p class=\"outcome\">%s</p>\n", html.EscapeString(outcome(cfg, runs)))
	fmt.Fprintf(&b, "<p>%s</p>\n<pre><code>%s</code></pre>\n", html.EscapeString(snippetCaption), html.EscapeString(snippet))
	b.WriteString("<h2>Goals with the library</h2>\n")
	writeGoals(&b, goals(cfg, runs, cal))
	fmt.Fprintf(&b, `<p class="note">Generated %s. Bulk jobs write records of %s RU, %d to a request; besides them the service answers %s user requests a second (point reads of %s RU, and a share %.0f%% of small writes of %s RU), spread over the replicas with Poisson arrivals, and sent by the SDK's retry policy (9 retries, 30 s of retry-after waits). With the library each replica reserves %s RU/s for its users, the user requests' RU are charged through the replica's budget, and %s RU/s are shared in %d partitions of %s RU/s, leased through the %s store; %s RU/s of the budget are left unused (headroom for the datastore's one-second windows). Without the library each replica sends %d bulk requests at a time. The simulated datastore answers every request in %s and throttles it, uncharged, when its one-second window is full.</p>`+"\n",
		at.Format(time.RFC1123), num(uint64(cfg.cost)), cfg.batch, strconv.FormatFloat(cfg.interactiveRate, 'f', -1, 64),
		num(uint64(cfg.readRU)), 100*cfg.writeShare, num(uint64(cfg.writeRU)), num(uint64(cfg.reserve())),
		num(uint64(cfg.shared())), cfg.shared()/cfg.factor, num(uint64(cfg.factor)), html.EscapeString(cfg.store),
		num(uint64(cfg.unused())), cfg.workers, cfg.latency)
	b.WriteString("<h2>Summary</h2>\n")
	writeTable(&b, summaryRows(runs))
	writeLatencyChart(&b, cfg, runs, latencyGoal(cfg, cal))
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
	return b.String(), nil
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

// writeGoals writes the goals table: each claim, its target, this run's
// figure and whether it was met.
func writeGoals(b *strings.Builder, gs []goal) {
	b.WriteString("<table>\n<tr><th>with the library</th><th>goal</th><th>this run</th><th></th></tr>\n")
	for _, g := range gs {
		class, word := "met", "met"
		if !g.Met {
			class, word = "missed", "not met"
		}
		fmt.Fprintf(b, "<tr><td>%s</td><td>%s</td><td class=\"n\">%s</td><td class=\"%s\">%s</td></tr>\n",
			html.EscapeString(g.What), html.EscapeString(g.Want), html.EscapeString(g.Got), class, word)
	}
	b.WriteString("</table>\n")
}

// writeLatencyChart draws the user requests' p99 latency in each second of
// every run on one logarithmic chart, with the goal as a dashed line.
func writeLatencyChart(b *strings.Builder, cfg config, runs []*runResult, goal time.Duration) {
	var names []string
	var values [][]float64
	hi := 2 * msf(goal)
	for _, r := range runs {
		names = append(names, r.label())
		var v []float64
		for _, s := range r.Seconds {
			p := msf(s.Users.P99)
			v = append(v, p)
			hi = max(hi, p)
		}
		values = append(values, v)
	}
	lo := max(float64(cfg.latency)/float64(time.Millisecond)/2, 0.1)
	b.WriteString("<h2>User requests: p99 latency in each second</h2>\n")
	b.WriteString(logLines("p99 latency of the user requests answered in each second, ms (log scale)", names, values,
		msf(goal), "goal: "+ms(goal), lo, niceCeil(hi*1.1)))
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
