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
	}{{0.5, 51 * time.Millisecond}, {0.95, 96 * time.Millisecond}, {0.99, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := Quantile(d, tc.q); got != tc.want {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if d[0] != 100*time.Millisecond {
		t.Error("Quantile sorted its input")
	}
	m := metrics{}
	Report(m, "resume-", d, 0.5, 0.99)
	if m["resume-p50-ms"] != 51 || m["resume-p99-ms"] != 100 || len(m) != 2 {
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
