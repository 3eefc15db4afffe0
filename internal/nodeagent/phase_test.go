package nodeagent

import (
	"testing"

	"google.golang.org/protobuf/proto"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/nodeapi"
)

// TestBuildProgress: a node sends each phase of a golden build as the
// enum and, for API servers older than it, as its human text; the
// registry hands the BuildGolden call the same phase from that event and
// from an older node's (text only), and drops a text it does not know.
func TestBuildProgress(t *testing.T) {
	r, wf, _ := newTestRegistry(t)
	relay := func(ev *atev1.NodeEvent) (nodeapi.BuildPhase, bool) {
		phases := make(chan nodeapi.BuildPhase, 1)
		m := &member{name: "n", remote: &Remote{builds: map[string]chan nodeapi.BuildPhase{"t-1": phases}}}
		r.event(t.Context(), m, wf, ev, nil)
		select {
		case p := <-phases:
			return p, true
		default:
			return 0, false
		}
	}
	for _, p := range []nodeapi.BuildPhase{nodeapi.PhaseImage, nodeapi.PhaseBoot, nodeapi.PhaseProbe, nodeapi.PhaseCheckpoint} {
		t.Run(p.Text(), func(t *testing.T) {
			ev := buildProgressEvent("t-1", p)
			if ev.GetBuildPhase() != p {
				t.Errorf("event %v, want build_phase %v", ev, p)
			}
			// An older node sends the same event without the enum.
			older := proto.CloneOf(ev)
			older.BuildPhase = atev1.BuildPhase_BUILD_PHASE_UNSPECIFIED
			for name, ev := range map[string]*atev1.NodeEvent{"current node": ev, "older node": older} {
				if got, ok := relay(ev); !ok || got != p {
					t.Errorf("%s: relayed %v (%v), want %v", name, got, ok, p)
				}
			}
		})
	}
	t.Run("unknown text", func(t *testing.T) {
		ev := &atev1.NodeEvent{Kind: atev1.NodeEvent_BUILD_PROGRESS, TemplateUid: "t-1"}
		ev.FillBuildPhase(99) // a text no phase has: "99"
		ev.BuildPhase = atev1.BuildPhase_BUILD_PHASE_UNSPECIFIED
		if got, ok := relay(ev); ok {
			t.Errorf("relayed %v, want nothing", got)
		}
	})
}

// TestNodeToProto: ListNodes reports each node phase as the enum and,
// for clients older than it, as the deprecated phase_name; a LOST node
// counts no workers.
func TestNodeToProto(t *testing.T) {
	for _, tc := range []struct {
		phase       atev1.Node_Phase
		name        string
		wantWorkers int32
	}{
		{atev1.Node_READY, "READY", 2},
		{atev1.Node_DRAINING, "DRAINING", 2},
		{atev1.Node_PENDING, "PENDING", 2},
		{atev1.Node_LOST, "LOST", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &member{name: "n", phase: tc.phase, workers: []string{"w-0", "w-1"}}
			got := m.toProto(1)
			// A client older than the enum reads the name alone.
			older := proto.CloneOf(got)
			older.Phase = atev1.Node_PHASE_UNSPECIFIED
			if got.GetPhase() != tc.phase || older.PhaseOrName() != tc.phase || got.GetWorkers() != tc.wantWorkers {
				t.Errorf("phase %v, phase_name names %v, workers %d; want %v, %d",
					got.GetPhase(), older.PhaseOrName(), got.GetWorkers(), tc.phase, tc.wantWorkers)
			}
		})
	}
}
