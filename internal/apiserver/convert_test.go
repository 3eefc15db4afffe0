package apiserver

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
)

// TestTemplateStatusToProto: every template phase the store keeps goes
// out as the enum and, for clients older than it, as the deprecated
// phase_name (which alone must name the same phase); the build phases,
// and the message that joins their text, go out as kept.
func TestTemplateStatusToProto(t *testing.T) {
	building := []atev1.BuildPhase{atev1.BuildPhase_IMAGE, atev1.BuildPhase_BOOT}
	for _, tc := range []struct {
		tpl  store.Template
		want atev1.ActorTemplateStatus_Phase
	}{
		{store.Template{Phase: store.TemplateBuilding, BuildPhases: building,
			Message: "pulling and unpacking the image; booting the sandbox"}, atev1.ActorTemplateStatus_BUILDING},
		{store.Template{Phase: store.TemplateReady, GoldenSnapshot: "t/golden"}, atev1.ActorTemplateStatus_READY},
		{store.Template{Phase: store.TemplateFailed, Message: "boom", BuildPhases: building[:1]}, atev1.ActorTemplateStatus_FAILED},
	} {
		t.Run(string(tc.tpl.Phase), func(t *testing.T) {
			got := templateStatusToProto(&tc.tpl)
			if got.GetPhase() != tc.want {
				t.Errorf("phase %v, want %v", got.GetPhase(), tc.want)
			}
			// A client older than the enum reads the name alone.
			older := proto.CloneOf(got)
			older.Phase = atev1.ActorTemplateStatus_PHASE_UNSPECIFIED
			if p := older.PhaseOrName(); p != tc.want {
				t.Errorf("phase_name names %v, want %v", p, tc.want)
			}
			if !slices.Equal(got.GetBuildPhases(), tc.tpl.BuildPhases) || got.GetMessage() != tc.tpl.Message {
				t.Errorf("build phases %v, message %q; want %v, %q", got.GetBuildPhases(), got.GetMessage(), tc.tpl.BuildPhases, tc.tpl.Message)
			}
		})
	}
}

// TestWorkerToProto: a worker's phase goes out as the enum and as the
// deprecated phase_name, which alone names the same phase.
func TestWorkerToProto(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    store.Worker
		want atev1.Worker_Phase
	}{
		{"free", store.Worker{Name: "w-0", Node: "n"}, atev1.Worker_FREE},
		{"claimed", store.Worker{Name: "w-1", Node: "n", Actor: names.ActorKey{Atespace: "default", Name: "a"}, ActorUID: "a-uid"},
			atev1.Worker_CLAIMED},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := workerToProto(&tc.w)
			older := proto.CloneOf(got)
			older.Phase = atev1.Worker_PHASE_UNSPECIFIED
			if got.GetPhase() != tc.want || older.PhaseOrName() != tc.want {
				t.Errorf("phase %v, phase_name names %v; want %v", got.GetPhase(), older.PhaseOrName(), tc.want)
			}
		})
	}
}
