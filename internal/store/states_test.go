package store

import (
	"slices"
	"testing"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// TestActorStatesAreTheAPIs: ActorStates is the API's enum, every value
// but the unspecified one, by name and in order, so what counts by it
// (ate_lifecycle_actors) misses none.
func TestActorStatesAreTheAPIs(t *testing.T) {
	var want []ActorState
	for v := int32(1); ; v++ {
		name, ok := atev1.ActorState_name[v]
		if !ok {
			break
		}
		want = append(want, ActorState(name))
	}
	if got := ActorStates(); !slices.Equal(got, want) || len(want) != len(atev1.ActorState_name)-1 {
		t.Errorf("ActorStates() = %v, want the API's %v", got, want)
	}
}
