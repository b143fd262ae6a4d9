package main

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
)

// palette colours the replicas in the charts, in order.
var palette = []string{"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#bab0ac"}

func colour(i int) string { return palette[i%len(palette)] }

// chart draws one inline SVG chart: seconds on the x axis, a quantity on
// the y axis, a dashed budget line and a legend. Nothing in it refers to
// anything outside the page.
type chart struct {
	title  string
	names  []string    // one series per name
	values [][]float64 // values[i][k]: series i in second k
	limit  float64     // the budget line; 0 for none
	yMax   float64
	marks  []uint64 // 429s per second, drawn above the bars; nil for none
	w, h   int
	left   int // room for the y labels
	bottom int // room for the x labels
	top    int
}

func newChart(title string, names []string, values [][]float64, limit, yMax float64) *chart {
	return &chart{title: title, names: names, values: values, limit: limit, yMax: niceCeil(yMax),
		w: 820, h: 280, left: 64, bottom: 44, top: 26}
}

// seconds returns how many seconds the chart spans.
func (c *chart) seconds() int {
	n := 0
	for _, v := range c.values {
		n = max(n, len(v))
	}
	return max(n, 1)
}

func (c *chart) plotW() float64 { return float64(c.w - c.left - 12) }
func (c *chart) plotH() float64 { return float64(c.h - c.bottom - c.top) }

// x returns the left edge of second k; y the height of value v.
func (c *chart) x(k float64) float64 { return float64(c.left) + k*c.plotW()/float64(c.seconds()) }
func (c *chart) y(v float64) float64 { return float64(c.top) + c.plotH()*(1-v/c.yMax) }

// stacked returns the chart as stacked bars, one bar per second.
func (c *chart) stacked() string {
	var b strings.Builder
	c.open(&b)
	bw := c.plotW() / float64(c.seconds())
	for k := 0; k < c.seconds(); k++ {
		base := 0.0
		for i, v := range c.values {
			if k >= len(v) || v[k] <= 0 {
				continue
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s, second %d: %.0f</title></rect>`+"\n",
				c.x(float64(k))+1, c.y(base+v[k]), max(bw-2, 1), c.y(base)-c.y(base+v[k]), colour(i),
				html.EscapeString(c.names[i]), k+1, v[k])
			base += v[k]
		}
		if k < len(c.marks) && c.marks[k] > 0 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" class="mark" text-anchor="middle">%d</text>`+"\n",
				c.x(float64(k)+0.5), c.y(base)-4, c.marks[k])
		}
	}
	c.close(&b, c.marks != nil)
	return b.String()
}

// lines returns the chart as one step line per series.
func (c *chart) lines() string {
	var b strings.Builder
	c.open(&b)
	for i, v := range c.values {
		var pts []string
		for k, val := range v {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f %.1f,%.1f", c.x(float64(k)), c.y(val), c.x(float64(k+1)), c.y(val)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", colour(i), strings.Join(pts, " "))
	}
	c.close(&b, false)
	return b.String()
}

// open writes the svg element, the title, the grid and the axes' labels.
func (c *chart) open(b *strings.Builder) {
	fmt.Fprintf(b, `<svg viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s">`+"\n",
		c.w, c.h, c.w, c.h, html.EscapeString(c.title))
	fmt.Fprintf(b, `<text x="%d" y="16" class="title">%s</text>`+"\n", c.left, html.EscapeString(c.title))
	step := niceStep(c.yMax / 5)
	for v := 0.0; v <= c.yMax+1e-9; v += step {
		fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" class="grid"/>`, c.left, c.w-12, c.y(v), c.y(v))
		fmt.Fprintf(b, `<text x="%d" y="%.1f" class="axis" text-anchor="end">%s</text>`+"\n", c.left-6, c.y(v)+4, num(uint64(v)))
	}
	every := max(1, int(math.Ceil(float64(c.seconds())/15)))
	for k := 0; k <= c.seconds(); k += every {
		fmt.Fprintf(b, `<text x="%.1f" y="%d" class="axis" text-anchor="middle">%d</text>`, c.x(float64(k)), c.h-c.bottom+16, k)
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%d" class="axis" text-anchor="middle">seconds</text>`+"\n", c.x(float64(c.seconds())/2), c.h-c.bottom+30)
}

// close draws the budget line and the legend and ends the svg element.
func (c *chart) close(b *strings.Builder, marks bool) {
	if c.limit > 0 {
		fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" class="budget"/>`+"\n", c.left, c.w-12, c.y(c.limit), c.y(c.limit))
	}
	x := float64(c.left)
	y := c.h - 6
	for i, name := range c.names {
		fmt.Fprintf(b, `<rect x="%.0f" y="%d" width="10" height="10" fill="%s"/><text x="%.0f" y="%d" class="axis">%s</text>`,
			x, y-9, colour(i), x+14, y, html.EscapeString(name))
		x += 24 + 7*float64(len(name))
	}
	if c.limit > 0 {
		fmt.Fprintf(b, `<line x1="%.0f" x2="%.0f" y1="%d" y2="%d" class="budget"/><text x="%.0f" y="%d" class="budget-label">budget %s RU/s</text>`,
			x+4, x+28, y-4, y-4, x+32, y, num(uint64(c.limit)))
		x += 150
	}
	if marks {
		fmt.Fprintf(b, `<text x="%.0f" y="%d" class="mark">n: 429s in that second</text>`, x+8, y)
	}
	b.WriteString("</svg>\n")
}

// niceStep rounds raw up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// logLines returns one step line per series on a logarithmic y axis from
// yMin to yMax, with a dashed line at limit (0 for none) labelled
// limitLabel. Values at or below zero (a second without data) leave a gap.
func logLines(title string, names []string, values [][]float64, limit float64, limitLabel string, yMin, yMax float64) string {
	c := &chart{title: title, names: names, values: values, yMax: yMax, w: 820, h: 300, left: 64, bottom: 44, top: 26}
	lo, hi := math.Log10(yMin), math.Log10(yMax)
	y := func(v float64) float64 {
		v = min(max(v, yMin), yMax)
		return float64(c.top) + c.plotH()*(1-(math.Log10(v)-lo)/(hi-lo))
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s">`+"\n",
		c.w, c.h, c.w, c.h, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="%d" y="16" class="title">%s</text>`+"\n", c.left, html.EscapeString(title))
	for p := math.Floor(lo); p <= hi; p++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, p)
			if v < yMin*0.999 || v > yMax*1.001 {
				continue
			}
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" class="grid"/>`, c.left, c.w-12, y(v), y(v))
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" class="axis" text-anchor="end">%s</text>`+"\n", c.left-6, y(v)+4, strconv.FormatFloat(v, 'g', -1, 64))
		}
	}
	every := max(1, int(math.Ceil(float64(c.seconds())/15)))
	for k := 0; k <= c.seconds(); k += every {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" class="axis" text-anchor="middle">%d</text>`, c.x(float64(k)), c.h-c.bottom+16, k)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" class="axis" text-anchor="middle">seconds</text>`+"\n", c.x(float64(c.seconds())/2), c.h-c.bottom+30)
	for i, v := range values {
		var pts []string
		flush := func() {
			if len(pts) > 0 {
				fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", colour(i), strings.Join(pts, " "))
				pts = pts[:0]
			}
		}
		for k, val := range v {
			if val <= 0 {
				flush()
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f %.1f,%.1f", c.x(float64(k)), y(val), c.x(float64(k+1)), y(val)))
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="6" fill="none"><title>%s, second %d: %.1f</title></rect>`+"\n",
				c.x(float64(k)), y(val)-3, c.x(float64(k+1))-c.x(float64(k)), html.EscapeString(names[i]), k+1, val)
		}
		flush()
	}
	x := float64(c.left)
	ly := c.h - 6
	if limit > 0 {
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" class="budget"/>`+"\n", c.left, c.w-12, y(limit), y(limit))
	}
	for i, name := range names {
		fmt.Fprintf(&b, `<rect x="%.0f" y="%d" width="10" height="10" fill="%s"/><text x="%.0f" y="%d" class="axis">%s</text>`,
			x, ly-9, colour(i), x+14, ly, html.EscapeString(name))
		x += 30 + 7*float64(len(name))
	}
	if limit > 0 {
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%d" y2="%d" class="budget"/><text x="%.0f" y="%d" class="budget-label">%s</text>`,
			x+4, x+28, ly-4, ly-4, x+32, ly, html.EscapeString(limitLabel))
	}
	b.WriteString("</svg>\n")
	return b.String()
}
