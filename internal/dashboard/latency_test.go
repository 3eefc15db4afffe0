package dashboard

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestHistQuantile(t *testing.T) {
	bounds := []float64{0.1, 0.2, 0.4}
	tests := []struct {
		name   string
		counts []uint64 // cumulative, per bound
		count  uint64
		q      float64
		want   float64
	}{
		{name: "empty", counts: []uint64{0, 0, 0}, count: 0, q: 0.5, want: 0},
		{name: "all in first bucket, median", counts: []uint64{10, 10, 10}, count: 10, q: 0.5, want: 0.05},
		{name: "interpolated in second bucket", counts: []uint64{0, 4, 4}, count: 4, q: 0.5, want: 0.15},
		{name: "p95 across buckets", counts: []uint64{50, 90, 100}, count: 100, q: 0.95, want: 0.3},
		{name: "rank in +Inf bucket gives the top bound", counts: []uint64{1, 1, 1}, count: 10, q: 0.95, want: 0.4},
		{name: "exact bucket edge", counts: []uint64{5, 10, 10}, count: 10, q: 0.5, want: 0.1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := hist{bounds: bounds, counts: tt.counts, count: tt.count}
			if got := h.quantile(tt.q); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("quantile(%v) = %v, want %v", tt.q, got, tt.want)
			}
		})
	}
}

// newTestHistory returns a history over a real registry with one
// labelled histogram, its first sample taken at t0 before any
// observation.
func newTestHistory(t *testing.T, samples int) (*LatencyHistory, *prometheus.HistogramVec, time.Time) {
	t.Helper()
	reg := prometheus.NewRegistry()
	hv := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ate_lifecycle_resume_seconds",
		Buckets: []float64{0.05, 0.1, 0.2, 0.5}}, []string{"source"})
	reg.MustRegister(hv)
	lh := NewLatencyHistory(LatencyConfig{Gatherer: reg, Series: []LatencySeries{
		{Metric: "ate_lifecycle_resume_seconds", Title: "Resume"}, {Metric: "ate_router_activation_wait_seconds", Title: "Wait"}},
		SampleInterval: 10 * time.Second, Window: 30 * time.Second, Samples: samples})
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	if err := lh.Sample(t0); err != nil {
		t.Fatal(err)
	}
	return lh, hv, t0
}

func TestLatencyHistoryWindows(t *testing.T) {
	lh, hv, t0 := newTestHistory(t, 100)
	// 0–10 s: ten fast resumes, two label sets (summed).
	for i := range 10 {
		hv.WithLabelValues([]string{"golden", "durable"}[i%2]).Observe(0.06)
	}
	mustSample(t, lh, t0.Add(10*time.Second))
	// 10–20 s: ten slow ones.
	for range 10 {
		hv.WithLabelValues("cold").Observe(0.3)
	}
	mustSample(t, lh, t0.Add(20*time.Second))
	// Nothing more: at 60 s the 30 s window holds none.
	mustSample(t, lh, t0.Add(60*time.Second))

	series, err := lh.Points(t0.Add(61 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(series) != 2 || series[0].Missing || !series[1].Missing {
		t.Fatalf("series %+v: want resume present, wait missing", series)
	}
	pts := series[0].Points
	// t0, 10 s, 20 s, 60 s and the live point at 61 s.
	if len(pts) != 5 {
		t.Fatalf("%d points, want 5: %+v", len(pts), pts)
	}
	check := func(i int, n uint64, p50 float64) {
		t.Helper()
		if pts[i].N != n || math.Abs(pts[i].P50-p50) > 0.01 {
			t.Errorf("point %d = N %d p50 %.2f ms, want N %d p50 %.2f ms", i, pts[i].N, pts[i].P50, n, p50)
		}
	}
	check(0, 0, 0)
	check(1, 10, 75)  // 0.05–0.1 bucket, rank 5 of 10: 50 + 50·5/10 ms
	check(2, 20, 100) // rank 10 of 20: the top of the 0.05–0.1 bucket
	check(3, 0, 0)    // the window (30–60 s) saw nothing
	check(4, 0, 0)
	// rank 19 of 20, with 10 at or below 0.2 s and 10 in 0.2–0.5 s:
	// 200 + 300·(19−10)/10 ms.
	if p95 := pts[2].P95; math.Abs(p95-470) > 0.01 {
		t.Errorf("p95 at 20 s = %.2f ms, want 470", p95)
	}
}

func TestLatencyHistoryRingIsBounded(t *testing.T) {
	lh, hv, t0 := newTestHistory(t, 3)
	for i := 1; i <= 10; i++ {
		hv.WithLabelValues("golden").Observe(0.06)
		mustSample(t, lh, t0.Add(time.Duration(i)*10*time.Second))
	}
	lh.mu.Lock()
	n := len(lh.ring)
	lh.mu.Unlock()
	if n != 3 {
		t.Fatalf("ring holds %d samples, want 3", n)
	}
	series, err := lh.Points(t0.Add(100 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	pts := series[0].Points
	// The oldest kept sample has no baseline once older ones are gone;
	// the others count the 30 s window: at most 3 observations, not 10.
	if len(pts) != 3 {
		t.Fatalf("%d points, want 3 (two kept samples with a baseline, and now): %+v", len(pts), pts)
	}
	for _, p := range pts {
		if p.N == 0 || p.N > 3 {
			t.Errorf("point at %s counts %d observations, want 1–3 (the window's)", p.T.Sub(t0), p.N)
		}
	}
}

func TestLatencyHistoryWithoutMetrics(t *testing.T) {
	lh := NewLatencyHistory(LatencyConfig{})
	if lh.Enabled() {
		t.Fatal("history without a gatherer says it is enabled")
	}
	if s, err := lh.Points(time.Now()); s != nil || err != nil {
		t.Errorf("Points = %v, %v; want nothing", s, err)
	}
}

func mustSample(t *testing.T, lh *LatencyHistory, at time.Time) {
	t.Helper()
	if err := lh.Sample(at); err != nil {
		t.Fatal(err)
	}
}
