package atev1

import "testing"

// TestPhaseOrName: a client reads the enum, and the deprecated name only
// from a server older than the enum (enum unspecified).
func TestPhaseOrName(t *testing.T) {
	t.Run("template", func(t *testing.T) {
		testPhaseOrName(t, []phaseCase[*ActorTemplateStatus, ActorTemplateStatus_Phase]{
			{"both", &ActorTemplateStatus{Phase: ActorTemplateStatus_READY, PhaseName: "READY"}, ActorTemplateStatus_READY},
			{"enum wins", &ActorTemplateStatus{Phase: ActorTemplateStatus_FAILED, PhaseName: "READY"}, ActorTemplateStatus_FAILED},
			{"older server", &ActorTemplateStatus{PhaseName: "BUILDING"}, ActorTemplateStatus_BUILDING},
			{"unknown name", &ActorTemplateStatus{PhaseName: "SIDEWAYS"}, ActorTemplateStatus_PHASE_UNSPECIFIED},
			{"nil", nil, ActorTemplateStatus_PHASE_UNSPECIFIED},
		})
	})
	t.Run("worker", func(t *testing.T) {
		testPhaseOrName(t, []phaseCase[*Worker, Worker_Phase]{
			{"enum", &Worker{Phase: Worker_CLAIMED}, Worker_CLAIMED},
			{"older server", &Worker{PhaseName: "FREE"}, Worker_FREE},
			{"neither", &Worker{}, Worker_PHASE_UNSPECIFIED},
		})
	})
	t.Run("node", func(t *testing.T) {
		testPhaseOrName(t, []phaseCase[*Node, Node_Phase]{
			{"both", &Node{Phase: Node_DRAINING, PhaseName: "DRAINING"}, Node_DRAINING},
			{"older server: lost", &Node{PhaseName: "LOST"}, Node_LOST},
			{"older server: pending", &Node{PhaseName: "PENDING"}, Node_PENDING},
		})
	})
}

// phaseCase is a message of type M whose PhaseOrName should be want.
type phaseCase[M interface{ PhaseOrName() P }, P comparable] struct {
	name string
	msg  M
	want P
}

// testPhaseOrName checks each case's PhaseOrName: the one loop the
// template, worker and node phases share.
func testPhaseOrName[M interface{ PhaseOrName() P }, P comparable](t *testing.T, cases []phaseCase[M, P]) {
	t.Helper()
	for _, tc := range cases {
		if got := tc.msg.PhaseOrName(); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestBuildPhaseOrText: an API server reads a BUILD_PROGRESS event's
// enum, and the deprecated human text only from a node older than the
// enum.
func TestBuildPhaseOrText(t *testing.T) {
	for _, tc := range []struct {
		name string
		ev   *NodeEvent
		want BuildPhase
	}{
		{"enum and text", &NodeEvent{BuildPhase: BuildPhase_BOOT, Phase: "booting the sandbox"}, BuildPhase_BOOT},
		{"enum only", &NodeEvent{BuildPhase: BuildPhase_PROBE}, BuildPhase_PROBE},
		{"older node: image", &NodeEvent{Phase: "pulling and unpacking the image"}, BuildPhase_IMAGE},
		{"older node: boot", &NodeEvent{Phase: "booting the sandbox"}, BuildPhase_BOOT},
		{"older node: probe", &NodeEvent{Phase: "waiting for the wakeup probe"}, BuildPhase_PROBE},
		{"older node: checkpoint", &NodeEvent{Phase: "checkpointing the golden snapshot"}, BuildPhase_CHECKPOINT},
		{"older node: unknown text", &NodeEvent{Phase: "reticulating splines"}, BuildPhase_BUILD_PHASE_UNSPECIFIED},
		{"neither", &NodeEvent{}, BuildPhase_BUILD_PHASE_UNSPECIFIED},
		{"nil", nil, BuildPhase_BUILD_PHASE_UNSPECIFIED},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.ev.BuildPhaseOrText(); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestBuildPhaseText: every phase has its own human text, which parses
// back to it; a value without one shows its name.
func TestBuildPhaseText(t *testing.T) {
	seen := map[string]BuildPhase{}
	for n := range BuildPhase_name {
		p := BuildPhase(n)
		if p == BuildPhase_BUILD_PHASE_UNSPECIFIED {
			continue
		}
		text := p.Text()
		if text == p.String() {
			t.Errorf("%v has no human text", p)
		}
		if q, dup := seen[text]; dup {
			t.Errorf("%v and %v share the text %q", p, q, text)
		}
		seen[text] = p
		if got := BuildPhaseOfText(text); got != p {
			t.Errorf("BuildPhaseOfText(%q) = %v, want %v", text, got, p)
		}
	}
	if got := BuildPhase(99).Text(); got != "99" {
		t.Errorf("BuildPhase(99).Text() = %q, want its number", got)
	}
}
