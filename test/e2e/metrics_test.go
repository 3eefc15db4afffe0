package e2e

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestMetrics: the management listener's counters move by exactly what a
// resume through the router and a suspend did, and pprof answers.
func TestMetrics(t *testing.T) {
	in := startUp(t, 2, "--demo")
	if in.metricsAddr == "" {
		t.Fatal(`"ate up ready" names no metrics address`)
	}
	before := in.scrape()
	// counter-1 has no snapshot of its own yet: the golden one.
	in.mustCount("default/counter-1", 1)
	in.suspend("counter-1")
	after := in.scrape()

	for _, c := range []struct {
		name   string
		labels map[string]string
		delta  float64
	}{
		{"ate_lifecycle_resumes_total", map[string]string{"source": "golden", "outcome": "ok"}, 1},
		{"ate_lifecycle_resumes_total", map[string]string{"source": "durable", "outcome": "ok"}, 0},
		{"ate_lifecycle_resumes_total", map[string]string{"source": "golden", "outcome": "failed"}, 0},
		{"ate_lifecycle_resume_seconds", map[string]string{"source": "golden"}, 1},
		{"ate_router_requests_total", map[string]string{"activation": "resumed", "code": "2xx"}, 1},
		{"ate_router_requests_total", map[string]string{"activation": "warm", "code": "2xx"}, 0},
		{"ate_router_activation_wait_seconds", map[string]string{"activation": "resumed"}, 1},
		{"ate_lifecycle_checkpoints_total", map[string]string{"action": "suspend", "reason": "requested", "outcome": "ok"}, 1},
		{"ate_lifecycle_checkpoints_total", map[string]string{"action": "suspend", "reason": "requested", "outcome": "failed"}, 0},
		{"ate_lifecycle_evictions_total", map[string]string{"outcome": "ok"}, 0},
		{"ate_router_failures_total", nil, 0},
		{"ate_node_standby_starts_total", nil, 1},
	} {
		b, a := sample(t, before, c.name, c.labels), sample(t, after, c.name, c.labels)
		if a-b != c.delta {
			t.Errorf("%s%v moved by %g (%g → %g), want %g", c.name, c.labels, a-b, b, a, c.delta)
		}
	}
	for _, g := range []string{"ate_router_parked_requests", "ate_lifecycle_capacity_waiters"} {
		if v := sample(t, after, g, nil); v != 0 {
			t.Errorf("%s = %g with nothing waiting", g, v)
		}
	}

	resp, err := httpClient.Get("http://" + in.metricsAddr + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /debug/pprof/ = %d", resp.StatusCode)
	}
}

// scrape reads the installation's /metrics.
func (in *installation) scrape() map[string]*dto.MetricFamily {
	in.t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + in.metricsAddr + "/metrics")
	if err != nil {
		in.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		in.t.Fatalf("GET /metrics = %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		in.t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// sample sums name's series whose labels include labels: counter and
// gauge values, a histogram's count.
func sample(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("/metrics has no %s", name)
	}
	var sum float64
	var matched bool
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range labels {
			match = match && have[k] == v
		}
		if !match {
			continue
		}
		matched = true
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		default:
			t.Fatalf("%s: unexpected type", name)
		}
	}
	if !matched {
		t.Fatalf("/metrics has no %s%s", name, fmt.Sprint(labels))
	}
	return sum
}
