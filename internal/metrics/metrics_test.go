package metrics

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
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
	r.Request(ActivationWarm, 200)
	r.Parked(1)
	r.Failure("stale")
	r.ActivationWait(ActivationResumed, 0)
	var l *Lifecycle
	l.Resume(SourceCold, 0, nil)
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
