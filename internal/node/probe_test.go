package node

import (
	"net/http"
	"sync/atomic"
	"testing"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/sandbox/fake"
	"substrate.dev/ate/internal/snapshot"
)

// TestProbePathKeepsQuery: a wakeup probe path with a query string is sent
// as path and query, not as one escaped path (which the fake, like the
// counter, answers 404 to).
func TestProbePathKeepsQuery(t *testing.T) {
	n := newTestNode(t, fake.New(fake.Config{}))
	spec := template("img1")
	spec.WakeupProbe = &atev1.Probe{HttpGet: &atev1.HTTPGetAction{Path: "/healthz?ready=1", Port: 8080}, TimeoutSeconds: 2}
	if err := n.Start(t.Context(), StartRequest{Worker: n.order[0], ActorUID: "a", Atespace: "ns", Name: "a", Spec: spec}); err != nil {
		t.Fatalf("start with probe path /healthz?ready=1: %v", err)
	}
}

// TestWakeupProbeAfterRestore: a template's wakeup probe runs after every
// boot, and after every restore unless its afterRestore is skip.
func TestWakeupProbeAfterRestore(t *testing.T) {
	own := func(opts CheckpointOptions) func(*testing.T, *Node) StartRequest {
		return func(t *testing.T, n *Node) StartRequest { return startAndCheckpoint(t, n, opts) }
	}
	full := CheckpointOptions{Scope: snapshot.ScopeFull}
	paused := CheckpointOptions{Scope: snapshot.ScopeFull, Paused: true}
	data := CheckpointOptions{Scope: snapshot.ScopeData}
	golden := func(t *testing.T, n *Node) StartRequest {
		t.Helper()
		ref, _, err := n.BuildGolden(t.Context(), "tpl", "ns", "tpl", template("img1"), "")
		if err != nil {
			t.Fatal(err)
		}
		return StartRequest{Worker: n.order[0], ActorUID: "b", Atespace: "ns", Name: "b", Snapshot: ref}
	}
	boot := func(_ *testing.T, n *Node) StartRequest {
		return StartRequest{Worker: n.order[0], ActorUID: "a", Atespace: "ns", Name: "a"}
	}
	for _, tc := range []struct {
		name         string
		afterRestore string
		prepare      func(*testing.T, *Node) StartRequest
		probed       bool
	}{
		{"default, boot", "", boot, true},
		{"default, restore of the actor's own snapshot", "", own(full), true},
		{"probe, restore of a paused checkpoint", atev1.ProbeAfterRestoreProbe, own(paused), true},
		{"default, restore of the golden snapshot", "", golden, true},
		{"skip, boot", atev1.ProbeAfterRestoreSkip, boot, true},
		{"skip, boot behind a Data snapshot", atev1.ProbeAfterRestoreSkip, own(data), true},
		{"skip, restore of the actor's own snapshot", atev1.ProbeAfterRestoreSkip, own(full), false},
		{"skip, restore of a paused checkpoint", atev1.ProbeAfterRestoreSkip, own(paused), false},
		{"skip, restore of the golden snapshot", atev1.ProbeAfterRestoreSkip, golden, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := newNoticeRuntime(t)
			n := newTestNodeWith(t, rt, false)
			req := tc.prepare(t, n)
			req.Spec = template("img1")
			req.Spec.WakeupProbe = &atev1.Probe{HttpGet: &atev1.HTTPGetAction{Path: "/ready", Port: hookPort},
				TimeoutSeconds: 1, AfterRestore: tc.afterRestore}
			var probes atomic.Int32
			rt.setHook(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet && r.URL.Path == "/ready" {
					probes.Add(1)
				}
			}))
			if err := n.Start(t.Context(), req); err != nil {
				t.Fatalf("Start: %v", err)
			}
			want := int32(0)
			if tc.probed {
				want = 1
			}
			if got := probes.Load(); got != want {
				t.Fatalf("wakeup probe called %d times, want %d", got, want)
			}
			_, _, release, ok := n.enter(req.Worker, req.ActorUID, plainRequest())
			if !ok {
				t.Fatal("tunnel refuses the actor after Start returned")
			}
			release()
		})
	}
}
