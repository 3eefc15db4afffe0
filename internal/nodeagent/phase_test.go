package nodeagent

import (
	"testing"

	"google.golang.org/protobuf/proto"

	atev1 "substrate.dev/ate/api/ate/v1"
)

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
