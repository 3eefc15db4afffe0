package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// TestFailedRestore breaks the actor's snapshot on disk: the request gets
// a clear 5xx, the actor is not left RESUMING, its worker is free again,
// and once the snapshot is good again a resume succeeds with memory intact;
// a delete succeeds too.
func TestFailedRestore(t *testing.T) {
	in := startUp(t, 2, "--demo")
	in.mustCount("default/counter-1", 1)
	in.mustCount("default/counter-1", 2)
	in.ate("suspend", "actor", "counter-1")
	snap := in.actor("counter-1").GetSnapshot()
	fix := in.breakSnapshot("counter-1")

	code, body, _, err := in.request(http.MethodGet, "default/counter-1", "/", "")
	if err != nil {
		t.Fatal(err)
	}
	if code < 500 || code == http.StatusInternalServerError || !strings.Contains(body, "could not be resumed") {
		t.Fatalf("request with broken snapshot = %d %q, want a clear 5xx (not 500)", code, body)
	}
	a := in.actor("counter-1")
	if a.GetState() != atev1.ActorState_SUSPENDED || a.GetWorker() != "" || a.GetSnapshot() != snap {
		t.Fatalf("after failed restore: state %v worker %q snapshot %q", a.GetState(), a.GetWorker(), a.GetSnapshot())
	}
	if !strings.Contains(a.GetMessage(), "resume failed") {
		t.Fatalf("actor message %q does not explain the failure", a.GetMessage())
	}
	if busy := in.busyWorkers(); len(busy) > 0 {
		t.Fatalf("workers not FREE after the failed restore: %v", busy)
	}

	// A good snapshot again: the actor resumes where it was.
	fix()
	in.mustCount("default/counter-1", 3)
	in.ate("suspend", "actor", "counter-1")
	in.ate("delete", "actor", "counter-1")
	if _, err := os.Stat(filepath.Join(in.dataDir, "snapshots", a.GetUid())); !os.IsNotExist(err) {
		t.Fatalf("snapshots of the deleted actor remain: %v", err)
	}
}
