package metrics

import (
	"context"
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"substrate.dev/ate/internal/activation"
	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/store"
)

// TestDocumented: docs/observability.md's metric table lists exactly the
// registered ate_* metrics.
func TestDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(ate_[a-z_]+)` \\|").FindAllSubmatch(doc, -1) {
		// ate controller's metrics are its own registry's
		// (internal/k8s/controller checks they are documented).
		if !strings.HasPrefix(string(m[1]), "ate_controller_") {
			documented = append(documented, string(m[1]))
		}
	}
	reg, err := NewRegistry(New())
	if err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var registered []string
	for _, f := range families {
		if n := f.GetName(); regexp.MustCompile(`^ate_`).MatchString(n) {
			registered = append(registered, n)
		}
	}
	// Every collector is exported from the start (label sets at zero),
	// so Gather sees all of them.
	if len(registered) != len(New().Collectors()) {
		t.Errorf("gathered %d ate_ metrics, have %d collectors", len(registered), len(New().Collectors()))
	}
	for _, n := range registered {
		if !slices.Contains(documented, n) {
			t.Errorf("%s is registered but not in docs/observability.md", n)
		}
	}
	for _, n := range documented {
		if !slices.Contains(registered, n) {
			t.Errorf("docs/observability.md lists %s, which is not registered", n)
		}
	}
}

// TestNilSafe: components without metrics pass nil.
func TestNilSafe(t *testing.T) {
	var r *Router
	r.Request(activation.Warm, 200)
	r.Parked(1)
	r.Failure("stale")
	r.ActivationWait(activation.Resumed, 0)
	var l *Lifecycle
	l.Resume(checkpoint.SourceCold, 0, nil)
	l.Checkpoint("suspend", "IDLE", nil)
	l.Eviction(OutcomeOK)
	l.Waiters(1)
	l.Expired()
	var n *Node
	n.StandbyStart(true)
	n.SelfServiceRefused(SelfRefusedRate)
	var a *Alarms
	a.Attempt(AlarmDelivered, time.Second)
	r.ParkOutcome(ParkBudget)
	r.ParkActivated(activation.Joined)
	r.Open(1)
	l.CheckpointDuration("suspend", time.Second, nil)
	l.LeaseConflict()
	l.CASRetry()
	n.Start(true, time.Second, nil)
	n.Checkpoint(time.Second, nil)
	n.SnapshotBytes(BytesRead, 1)
	n.ImageCache(true)
	n.WorkerSource(func() (int, int) { return 0, 0 })
	var g *GRPC
	_, _ = g.ServerOptions(), g.DialOptions()
	g.InitServer(nil)
}

func TestCodeClass(t *testing.T) {
	for status, want := range map[int]string{101: "1xx", 200: "2xx", 302: "3xx", 404: "4xx", 499: "4xx", 503: "5xx", 0: "5xx", 700: "5xx"} {
		if got := codeClass(status); got != want {
			t.Errorf("codeClass(%d) = %s, want %s", status, got, want)
		}
	}
}

// TestLabelValues: the label values of the typed words (activation
// kinds, restore sources, actor states) are the ones dashboards and
// alerts already match, exported at zero from the start.
func TestLabelValues(t *testing.T) {
	reg, err := NewRegistry(New())
	if err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				k := f.GetName() + "/" + l.GetName()
				if !slices.Contains(got[k], l.GetValue()) {
					got[k] = append(got[k], l.GetValue())
				}
			}
		}
	}
	for k, want := range map[string][]string{
		"ate_router_requests_total/activation":          {"joined", "none", "resumed", "warm"},
		"ate_router_activation_wait_seconds/activation": {"joined", "resumed"},
		"ate_router_park_outcomes_total/outcome":        {"budget", "client_gone", "failed", "grace", "joined", "resumed", "warm"},
		"ate_lifecycle_resumes_total/source":            {"cold", "durable", "golden", "paused"},
		"ate_lifecycle_resume_seconds/source":           {"cold", "durable", "golden", "paused"},
		"ate_lifecycle_actors/state":                    {"crashed", "deleting", "paused", "pausing", "resuming", "running", "suspended", "suspending"},
	} {
		slices.Sort(got[k])
		if !slices.Equal(got[k], want) {
			t.Errorf("%s = %q, want %q", k, got[k], want)
		}
	}
}

// TestTypedWordsCounted: the typed values land on their label values.
func TestTypedWordsCounted(t *testing.T) {
	m := New()
	m.Router.Request(activation.Resumed, 201)
	m.Router.Request(activation.None, 503)
	m.Router.ParkActivated(activation.Joined)
	m.Lifecycle.Resume(checkpoint.SourceGolden, time.Millisecond, nil)
	ctx, cancel := context.WithCancel(context.Background())
	err := m.Lifecycle.RunActorCounts(ctx, func(context.Context) (map[store.ActorState]int, error) {
		cancel()
		return map[store.ActorState]int{store.Paused: 3, store.Running: 2}, nil
	}, time.Hour, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("RunActorCounts = %v", err)
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"ate_router_requests_total", map[string]string{"activation": "resumed", "code": "2xx"}, 1},
		{"ate_router_requests_total", map[string]string{"activation": "none", "code": "5xx"}, 1},
		{"ate_router_park_outcomes_total", map[string]string{"outcome": "joined"}, 1},
		{"ate_lifecycle_resumes_total", map[string]string{"source": "golden", "outcome": "ok"}, 1},
		{"ate_lifecycle_actors", map[string]string{"state": "paused"}, 3},
		{"ate_lifecycle_actors", map[string]string{"state": "running"}, 2},
		{"ate_lifecycle_actors", map[string]string{"state": "crashed"}, 0},
	} {
		got, ok := metricValue(t, m, tc.name, tc.labels)
		if !ok {
			t.Fatalf("no %s%v", tc.name, tc.labels)
		}
		if got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
}

// metricValue gathers m's metrics and returns the value of the counter
// or gauge name whose labels are labels; ok is false when there is none
// (a vector none of whose children was set is not gathered at all).
func metricValue(t *testing.T, m *Metrics, name string, labels map[string]string) (v float64, ok bool) {
	t.Helper()
	reg, err := NewRegistry(m)
	if err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue metric
				}
			}
			switch {
			case mt.GetCounter() != nil:
				return mt.GetCounter().GetValue(), true
			case mt.GetGauge() != nil:
				return mt.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}
