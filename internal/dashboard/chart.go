package dashboard

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Chart geometry in SVG user units (the SVG scales to the page width).
const (
	chartW, chartH       = 640, 170
	padL, padR           = 52, 10
	padT, padB           = 10, 22
	plotW, plotH         = chartW - padL - padR, chartH - padT - padB
	chartYTicks          = 4
	chartMinMaxMs        = 10.0
	chartTimeFormat      = "15:04"
	chartLatestFormatter = "%.0f ms"
)

// chart is what the page template draws for one series: polylines in
// SVG coordinates (one per run of points without a gap) and axis labels.
type chart struct {
	Title    string
	W, H     int
	P50, P95 []string // each a polyline's points attribute
	YTicks   []tick
	XTicks   []tick
	// Latest sums up the newest point ("p50 84 ms · p95 97 ms · 12
	// activations in the last 1m0s"), or says there was none.
	Latest string
	// Empty says why nothing is drawn (no histogram, no observations).
	Empty string
	// PlotX0 … are the plot area's edges, for the axis lines.
	PlotX0, PlotX1, PlotY0, PlotY1 int
}

type tick struct {
	X, Y  float64
	Label string
	// Anchor is the label's text-anchor (start, middle, end), so the
	// axis's end labels stay inside the chart.
	Anchor string
}

// newChart lays sp out over [now-span, now] with the y axis from 0 to a
// rounded maximum of its p95s.
func newChart(sp SeriesPoints, now time.Time, span, window time.Duration) chart {
	c := chart{Title: sp.Title, W: chartW, H: chartH, PlotX0: padL, PlotX1: padL + plotW, PlotY0: padT, PlotY1: padT + plotH}
	if sp.Missing {
		c.Empty = "not recorded by this process"
		return c
	}
	from := now.Add(-span)
	maxMs := chartMinMaxMs
	for _, p := range sp.Points {
		if p.N > 0 && !p.T.Before(from) {
			maxMs = max(maxMs, p.P95)
		}
	}
	maxMs = niceCeil(maxMs)
	x := func(t time.Time) float64 {
		f := float64(t.Sub(from)) / float64(span)
		return padL + plotW*min(1, max(0, f))
	}
	y := func(ms float64) float64 { return padT + plotH*(1-min(1, ms/maxMs)) }
	// A run of points without a gap is one polyline; a run of one point
	// is drawn as a short level stroke, since a one-point polyline is
	// invisible.
	var run []Point
	flush := func() {
		if len(run) == 1 {
			p := run[0]
			run = []Point{{T: p.T.Add(-span / plotW * 8), P50: p.P50, P95: p.P95, N: p.N}, p}
		}
		if len(run) > 0 {
			var p50, p95 strings.Builder
			for _, p := range run {
				fmt.Fprintf(&p50, "%.1f,%.1f ", x(p.T), y(p.P50))
				fmt.Fprintf(&p95, "%.1f,%.1f ", x(p.T), y(p.P95))
			}
			c.P50 = append(c.P50, strings.TrimSpace(p50.String()))
			c.P95 = append(c.P95, strings.TrimSpace(p95.String()))
		}
		run = nil
	}
	for _, p := range sp.Points {
		if p.N == 0 || p.T.Before(from) {
			flush()
			continue
		}
		run = append(run, p)
	}
	flush()
	for i := 0; i <= chartYTicks; i++ {
		ms := maxMs * float64(i) / chartYTicks
		c.YTicks = append(c.YTicks, tick{X: padL - 4, Y: y(ms), Label: fmt.Sprintf("%g ms", ms)})
	}
	for i := 0; i <= 4; i++ {
		t := from.Add(span * time.Duration(i) / 4)
		anchor := "middle"
		switch i {
		case 0:
			anchor = "start"
		case 4:
			anchor = "end"
		}
		c.XTicks = append(c.XTicks, tick{X: x(t), Y: chartH - 6, Label: t.Local().Format(chartTimeFormat), Anchor: anchor})
	}
	switch last := lastPoint(sp.Points); {
	case last == nil || last.N == 0:
		c.Latest = fmt.Sprintf("no activations in the last %s", window)
	default:
		c.Latest = fmt.Sprintf("p50 "+chartLatestFormatter+" · p95 "+chartLatestFormatter+" · %d in the last %s", last.P50, last.P95, last.N, window)
	}
	if len(c.P50) == 0 {
		c.Empty = "no activations yet"
	}
	return c
}

func lastPoint(ps []Point) *Point {
	if len(ps) == 0 {
		return nil
	}
	return &ps[len(ps)-1]
}

// niceCeil rounds v > 0 up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}
