package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

// Chart geometry, in SVG user units (pixels).
const (
	chartWidth  = 1000
	labelWidth  = 330
	barAreaW    = 440
	barHeight   = 20
	barGap      = 8
	panelTitleH = 46
	panelGap    = 22
	chartTop    = 58
)

// Bar colours: the limits the system is compared with, the slow baselines,
// and the system's own numbers.
const (
	colourLimit    = "#9aa5b1"
	colourBaseline = "#e8a33d"
	colourSystem   = "#2f6db5"
)

type chartBar struct {
	label, colour, text string
	value               float64
}

type chartPanel struct {
	title string
	bars  []chartBar
}

// WriteChart draws results as an SVG of horizontal bar charts, one panel
// per kind of measurement (throughput, growth, latency with NOTIFY,
// latency with polling), each with its own linear scale starting at zero.
// Every number drawn comes from results; subtitle is printed under the
// title (for example the machine and the date).
func WriteChart(w io.Writer, results []Result, s Sizes, subtitle string) error {
	byName := map[string]Result{}
	for _, r := range results {
		byName[r.Name] = r
	}
	var panels []*chartPanel
	index := map[string]*chartPanel{}
	for _, sp := range specs(s) {
		r, ok := byName[sp.name]
		if !ok || sp.panel == "" {
			continue
		}
		p := index[sp.panel]
		if p == nil {
			p = &chartPanel{title: sp.panel}
			index[sp.panel] = p
			panels = append(panels, p)
		}
		text := formatValue(r.Value, r.Unit) + " " + r.Unit
		if r.Ratio != nil && sp.baseline != "" {
			text += fmt.Sprintf("  (%.2f x baseline)", *r.Ratio)
		}
		p.bars = append(p.bars, chartBar{label: sp.label, colour: barColour(sp.name), text: text, value: r.Value})
	}

	height := chartTop
	for _, p := range panels {
		height += panelTitleH + len(p.bars)*(barHeight+barGap) + panelGap
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="13">`+"\n",
		chartWidth, height, chartWidth, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	fmt.Fprintf(&b, `<text x="16" y="26" font-size="18" font-weight="bold">%s</text>`+"\n", html.EscapeString("make bench: measured results"))
	fmt.Fprintf(&b, `<text x="16" y="46" fill="#555">%s</text>`+"\n", html.EscapeString(subtitle))
	y := chartTop
	for _, p := range panels {
		y = drawPanel(&b, p, y)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func drawPanel(b *strings.Builder, p *chartPanel, y int) int {
	top := 0.0
	for _, bar := range p.bars {
		top = max(top, bar.value)
	}
	scale := niceCeil(top/4) * 4 // four grid steps of a round size
	fmt.Fprintf(b, `<text x="16" y="%d" font-size="15" font-weight="bold">%s</text>`+"\n", y+18, html.EscapeString(p.title))
	axisY := y + panelTitleH - 8
	barsH := len(p.bars) * (barHeight + barGap)
	for i := 0; i <= 4; i++ {
		x := labelWidth + barAreaW*i/4
		v := scale * float64(i) / 4
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#e3e3e3"/>`+"\n", x, axisY, x, axisY+barsH)
		fmt.Fprintf(b, `<text x="%d" y="%d" fill="#777" font-size="11" text-anchor="middle">%s</text>`+"\n", x, axisY-4, tick(v))
	}
	by := axisY + barGap/2
	for _, bar := range p.bars {
		wpx := 0.0
		if scale > 0 {
			wpx = float64(barAreaW) * bar.value / scale
		}
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", labelWidth-8, by+barHeight-5, html.EscapeString(bar.label))
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", labelWidth, by, wpx, barHeight, bar.colour)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" fill="#222" font-size="12">%s</text>`+"\n", float64(labelWidth)+wpx+6, by+barHeight-5, html.EscapeString(bar.text))
		by += barHeight + barGap
	}
	return axisY + barsH + panelGap
}

// barColour tells limits, slow baselines and the system's numbers apart.
func barColour(name string) string {
	switch {
	case strings.HasPrefix(name, "broker_"), strings.HasPrefix(name, "db_raw_"):
		return colourLimit
	case name == "relay_one_at_a_time", strings.HasPrefix(name, "latency_poll_"):
		return colourBaseline
	}
	return colourSystem
}

// niceCeil rounds v up to 1, 2, 2.5 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// tick formats an axis value: 12000 as "12k", 2.5 as "2.5".
func tick(v float64) string {
	if v >= 1000 && math.Mod(v, 1000) == 0 {
		return strconv.FormatFloat(v/1000, 'f', -1, 64) + "k"
	}
	if v >= 1000 {
		return strconv.FormatFloat(v/1000, 'f', 1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}
