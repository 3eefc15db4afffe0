package latency

import (
	"testing"
	"time"
)

type metrics map[string]float64

func (m metrics) ReportMetric(n float64, unit string) { m[unit] = n }

func TestQuantileAndReport(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.95, 95 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := Quantile(d, tc.q); got != tc.want {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if d[0] != 100*time.Millisecond {
		t.Error("Quantile sorted its input")
	}
	m := metrics{}
	Report(m, "resume-", d, 0.5, 0.99)
	if m["resume-p50-ms"] != 50 || m["resume-p99-ms"] != 99 || len(m) != 2 {
		t.Errorf("Report = %v", m)
	}
	if Quantile(nil, 0.5) != 0 {
		t.Error("Quantile of nothing is not zero")
	}
	Report(m, "none-", nil, 0.5)
	if _, ok := m["none-p50-ms"]; ok {
		t.Error("Report of nothing reported")
	}
}

// TestRank: the nearest rank is ceil(q·n)−1, also where q·n is whole.
func TestRank(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		q    float64
		want int
	}{
		{"median of ten", 10, 0.5, 4},
		{"p95 of twenty", 20, 0.95, 18},
		{"p95 of ten", 10, 0.95, 9},
		{"p99 of a hundred", 100, 0.99, 98},
		{"max", 10, 1, 9},
		{"min", 10, 0, 0},
		{"one sample median", 1, 0.5, 0},
		{"one sample min", 1, 0, 0},
		{"one sample max", 1, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := rank(tc.n, tc.q); got != tc.want {
				t.Errorf("rank(%d, %v) = %d, want %d", tc.n, tc.q, got, tc.want)
			}
		})
	}
}
