package atev1

import "testing"

// TestPhaseOrName: a client reads the enum, and the deprecated name only
// from a server older than the enum (enum unspecified).
func TestPhaseOrName(t *testing.T) {
	t.Run("template", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			st   *ActorTemplateStatus
			want ActorTemplateStatus_Phase
		}{
			{"both", &ActorTemplateStatus{Phase: ActorTemplateStatus_READY, PhaseName: "READY"}, ActorTemplateStatus_READY},
			{"enum wins", &ActorTemplateStatus{Phase: ActorTemplateStatus_FAILED, PhaseName: "READY"}, ActorTemplateStatus_FAILED},
			{"older server", &ActorTemplateStatus{PhaseName: "BUILDING"}, ActorTemplateStatus_BUILDING},
			{"unknown name", &ActorTemplateStatus{PhaseName: "SIDEWAYS"}, ActorTemplateStatus_PHASE_UNSPECIFIED},
			{"nil", nil, ActorTemplateStatus_PHASE_UNSPECIFIED},
		} {
			if got := tc.st.PhaseOrName(); got != tc.want {
				t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
			}
		}
	})
	t.Run("worker", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			w    *Worker
			want Worker_Phase
		}{
			{"enum", &Worker{Phase: Worker_CLAIMED}, Worker_CLAIMED},
			{"older server", &Worker{PhaseName: "FREE"}, Worker_FREE},
			{"neither", &Worker{}, Worker_PHASE_UNSPECIFIED},
		} {
			if got := tc.w.PhaseOrName(); got != tc.want {
				t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
			}
		}
	})
	t.Run("node", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			n    *Node
			want Node_Phase
		}{
			{"both", &Node{Phase: Node_DRAINING, PhaseName: "DRAINING"}, Node_DRAINING},
			{"older server: lost", &Node{PhaseName: "LOST"}, Node_LOST},
			{"older server: pending", &Node{PhaseName: "PENDING"}, Node_PENDING},
		} {
			if got := tc.n.PhaseOrName(); got != tc.want {
				t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
			}
		}
	})
}
