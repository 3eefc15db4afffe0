package e2e

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/router"
	"substrate.dev/ate/internal/snapshot"
)

// TestMetrics: the management listener's counters move by exactly what a
// resume through the router and a suspend did, and pprof answers on its
// own loopback listener, not on the management one.
func TestMetrics(t *testing.T) {
	pprofAddr := freeAddr(t)
	in := startUp(t, 2, "--demo", "--pprof-addr", pprofAddr)
	if in.metricsAddr == "" {
		t.Fatal(`"ate up ready" names no metrics address`)
	}
	before := in.scrape()
	// counter-1 has no snapshot of its own yet: the golden one.
	in.mustCount("default/counter-1", 1)
	in.suspend("counter-1")
	after := in.scrape()

	checkDeltas(t, before, after, []delta{
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
	})
	for _, g := range []string{"ate_router_parked_requests", "ate_lifecycle_capacity_waiters"} {
		if v := sample(t, after, g, nil); v != 0 {
			t.Errorf("%s = %g with nothing waiting", g, v)
		}
	}

	for _, c := range []struct {
		url  string
		want int
	}{
		{"http://" + pprofAddr + "/debug/pprof/", http.StatusOK},
		{"http://" + pprofAddr + "/debug/pprof/cmdline", http.StatusNotFound},
		{"http://" + in.metricsAddr + "/debug/pprof/", http.StatusNotFound},
	} {
		resp, err := httpClient.Get(c.url)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("GET %s = %d, want %d", c.url, resp.StatusCode, c.want)
		}
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

// delta is how much a metric's series with labels should move.
type delta struct {
	name   string
	labels map[string]string
	delta  float64
}

// checkDeltas fails t for every d that did not move by exactly d.delta
// from before to after. A series absent before counts as 0 there
// (gRPC client series appear with the first call).
func checkDeltas(t *testing.T, before, after map[string]*dto.MetricFamily, ds []delta) {
	t.Helper()
	for _, d := range ds {
		b, _ := sum(t, before, d.name, d.labels)
		a := sample(t, after, d.name, d.labels)
		if a-b != d.delta {
			t.Errorf("%s%v moved by %g (%g → %g), want %g", d.name, d.labels, a-b, b, a, d.delta)
		}
	}
}

// sample sums name's series whose labels include labels: counter and
// gauge values, a histogram's count.
func sample(t testing.TB, fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok := sum(t, fams, name, labels)
	if !ok {
		t.Fatalf("/metrics has no %s%s", name, fmt.Sprint(labels))
	}
	return v
}

// sum is sample, reporting whether any series matched instead of
// failing.
func sum(t testing.TB, fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	var total float64
	var matched bool
	for _, m := range fams[name].GetMetric() {
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
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Histogram != nil:
			total += float64(m.GetHistogram().GetSampleCount())
		default:
			t.Fatalf("%s: unexpected type", name)
		}
	}
	return total, matched
}

// TestMetricsScenario: after a resume through the router (parked, from
// the golden snapshot), a warm request, a suspend and a resume that fails
// on a corrupted snapshot, every metric of those steps moved by exactly
// what happened, the gauges are back at rest, and the router logged one
// access line per request.
func TestMetricsScenario(t *testing.T) {
	in := startUp(t, 2, "--demo")
	before := in.scrape()
	in.mustCount("default/counter-1", 1)
	in.mustCount("default/counter-1", 2)
	in.suspend("counter-1")
	corruptSnapshot(t, filepath.Join(in.dataDir, "snapshots", snapshot.Bare(in.actor("counter-1").GetSnapshot())))
	// Straight to the API (no retry policy on this client): one resume,
	// one failed restore.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := in.client.ResumeActor(ctx, &atev1.ResumeActorRequest{Atespace: "default", Name: "counter-1"}); err == nil {
		t.Fatal("resume from a truncated snapshot succeeded")
	}
	after := in.scrape()

	checkDeltas(t, before, after, []delta{
		{"ate_lifecycle_resumes_total", map[string]string{"source": "golden", "outcome": "ok"}, 1},
		{"ate_lifecycle_resumes_total", map[string]string{"source": "durable", "outcome": "failed"}, 1},
		{"ate_lifecycle_resumes_total", map[string]string{"source": "durable", "outcome": "ok"}, 0},
		{"ate_router_requests_total", map[string]string{"activation": "resumed", "code": "2xx"}, 1},
		{"ate_router_requests_total", map[string]string{"activation": "warm", "code": "2xx"}, 1},
		{"ate_router_requests_total", nil, 2},
		{"ate_router_park_outcomes_total", map[string]string{"outcome": "resumed"}, 1},
		{"ate_router_park_outcomes_total", nil, 1},
		{"ate_router_failures_total", nil, 0},
		{"ate_lifecycle_checkpoints_total", map[string]string{"action": "suspend", "reason": "requested", "outcome": "ok"}, 1},
		{"ate_lifecycle_checkpoints_total", nil, 1},
		{"ate_lifecycle_checkpoint_seconds", map[string]string{"action": "suspend", "outcome": "ok"}, 1},
		{"ate_node_start_seconds", map[string]string{"kind": "restore", "outcome": "ok"}, 1},
		{"ate_node_start_seconds", map[string]string{"kind": "restore", "outcome": "failed"}, 1},
		{"ate_node_start_seconds", map[string]string{"kind": "boot"}, 0},
		{"ate_node_checkpoint_seconds", map[string]string{"outcome": "ok"}, 1},
		{"ate_node_checkpoint_seconds", map[string]string{"outcome": "failed"}, 0},
		{"ate_node_image_cache_total", nil, 2},
		{"ate_lifecycle_lease_conflicts_total", nil, 0},
		{"ate_lifecycle_cas_retries_total", nil, 0},
		{"grpc_server_handled_total", map[string]string{"grpc_method": "ResumeActor"}, 2},
		{"grpc_client_handled_total", map[string]string{"grpc_method": "ResumeActor"}, 1},
	})
	// At least RESUMING, RUNNING, SUSPENDING, SUSPENDED and the failed
	// resume's RESUMING and rollback, some perhaps sharing a group commit.
	if d := sample(t, after, "ate_store_commit_writes", nil) - sample(t, before, "ate_store_commit_writes", nil); d < 4 {
		t.Errorf("ate_store_commit_writes counted %g transactions for a resume, a suspend and a failed resume", d)
	}
	for _, dir := range []string{"written", "read"} {
		l := map[string]string{"direction": dir}
		if d := sample(t, after, "ate_node_snapshot_bytes_total", l) - sample(t, before, "ate_node_snapshot_bytes_total", l); d <= 0 {
			t.Errorf("ate_node_snapshot_bytes_total{direction=%q} moved by %g", dir, d)
		}
	}
	for _, g := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"ate_router_parked_requests", nil, 0},
		{"ate_router_open_streams", nil, 0},
		{"ate_lifecycle_capacity_waiters", nil, 0},
		{"ate_node_workers", map[string]string{"state": "free"}, 2},
		{"ate_node_workers", map[string]string{"state": "busy"}, 0},
	} {
		if v := sample(t, after, g.name, g.labels); v != g.want {
			t.Errorf("%s%v = %g, want %g", g.name, g.labels, v, g.want)
		}
	}
	// Refreshed from the store's counts every few seconds.
	waitFor(t, "ate_lifecycle_actors to count counter-1 as suspended", 15*time.Second, func() bool {
		now := in.scrape()
		return sample(t, now, "ate_lifecycle_actors", map[string]string{"state": "suspended"}) == 1 &&
			sample(t, now, "ate_lifecycle_actors", nil) == 1
	})

	var lines []map[string]any
	for _, rec := range in.logRecords(router.AccessLogMessage) {
		if loggedActor(rec) == "counter-1" {
			lines = append(lines, rec)
		}
	}
	if len(lines) != 2 {
		t.Fatalf("%d access log lines for counter-1, want 2: %v", len(lines), lines)
	}
	for i, want := range []string{"resumed", "warm"} {
		rec := lines[i]
		if rec["activation"] != want || rec["status"] != float64(200) || rec["bytes_out"].(float64) <= 0 || rec["request_id"] == "" {
			t.Errorf("access log line %d = %v, want activation %s, status 200, bytes out, a request id", i, rec, want)
		}
	}
	if lines[0]["wait_ms"].(float64) <= 0 {
		t.Errorf("the resuming request's access line has wait_ms %v", lines[0]["wait_ms"])
	}
	if _, ok := lines[0]["trace_id"]; ok {
		t.Errorf("access log has a trace_id with tracing off: %v", lines[0])
	}
}

// corruptSnapshot truncates the largest data file of the local snapshot
// in dir, so its restore fails.
func corruptSnapshot(t *testing.T, dir string) {
	t.Helper()
	var target string
	var size int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || d.Name() == "manifest.json" {
			return err
		}
		info, err := d.Info()
		if err == nil && info.Size() > size {
			target, size = p, info.Size()
		}
		return err
	})
	if err != nil || target == "" {
		t.Fatalf("no data file in snapshot %s (%v)", dir, err)
	}
	if err := os.Truncate(target, size/2); err != nil {
		t.Fatal(err)
	}
}
