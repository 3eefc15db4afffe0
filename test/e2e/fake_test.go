package e2e

import "testing"

// TestFakeSandboxClass: `ate up --sandbox-class fake` runs the same
// control plane over in-process stand-ins: suspend and resume keep the
// emulated counter's state.
func TestFakeSandboxClass(t *testing.T) {
	in := startUp(t, 2, "--demo", "--sandbox-class", "fake")
	in.mustCount("default/counter-1", 1)
	in.mustCount("default/counter-1", 2)
	in.ate("suspend", "actor", "counter-1")
	in.mustCount("default/counter-1", 3)
	in.ate("pause", "actor", "counter-1")
	in.mustCount("default/counter-1", 4)
}
