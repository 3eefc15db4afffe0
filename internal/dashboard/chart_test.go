package dashboard

import (
	"strings"
	"testing"
	"time"
)

func TestNiceCeil(t *testing.T) {
	for _, tt := range []struct{ in, want float64 }{
		{10, 10}, {11, 20}, {84, 100}, {150, 200}, {201, 500}, {975, 1000}, {0.3, 0.5},
	} {
		if got := niceCeil(tt.in); got != tt.want {
			t.Errorf("niceCeil(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestChartLayout(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return now.Add(time.Duration(s) * time.Second) }
	tests := []struct {
		name      string
		points    []Point
		missing   bool
		wantLines int
		wantEmpty string
		wantTop   string // the y axis's highest label
		latest    string
	}{
		{name: "missing histogram", missing: true, wantEmpty: "not recorded by this process"},
		{name: "no observations", points: []Point{{T: at(-20)}, {T: at(0)}}, wantEmpty: "no activations yet",
			wantTop: "10 ms", latest: "no activations in the last 1m0s"},
		{name: "one point is still drawn", points: []Point{{T: at(0), P50: 80, P95: 95, N: 3}}, wantLines: 1,
			wantTop: "100 ms", latest: "p50 80 ms · p95 95 ms · 3 in the last 1m0s"},
		{name: "a gap splits the line", points: []Point{
			{T: at(-50), P50: 80, P95: 95, N: 3}, {T: at(-40), P50: 90, P95: 300, N: 4},
			{T: at(-30)},
			{T: at(-20), P50: 70, P95: 90, N: 1}, {T: at(-10), P50: 70, P95: 90, N: 1}}, wantLines: 2,
			wantTop: "500 ms", latest: "p50 70 ms · p95 90 ms · 1 in the last 1m0s"},
		{name: "points before the axis are left out", points: []Point{{T: at(-600), P50: 5000, P95: 9000, N: 1}, {T: at(0), P50: 20, P95: 30, N: 1}},
			wantLines: 1, wantTop: "50 ms", latest: "p50 20 ms · p95 30 ms · 1 in the last 1m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newChart(SeriesPoints{LatencySeries: LatencySeries{Title: "T"}, Points: tt.points, Missing: tt.missing}, now, 5*time.Minute, time.Minute)
			if len(c.P50) != tt.wantLines || len(c.P95) != tt.wantLines {
				t.Errorf("%d p50 and %d p95 lines, want %d", len(c.P50), len(c.P95), tt.wantLines)
			}
			for _, l := range append(c.P50, c.P95...) {
				if strings.Count(l, ",") < 2 {
					t.Errorf("line %q has fewer than two points: invisible", l)
				}
			}
			if c.Empty != tt.wantEmpty {
				t.Errorf("empty %q, want %q", c.Empty, tt.wantEmpty)
			}
			if tt.wantTop != "" && c.YTicks[len(c.YTicks)-1].Label != tt.wantTop {
				t.Errorf("y axis tops at %q, want %q", c.YTicks[len(c.YTicks)-1].Label, tt.wantTop)
			}
			if c.Latest != tt.latest {
				t.Errorf("latest %q, want %q", c.Latest, tt.latest)
			}
		})
	}
}
