package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/snapshot"
)

// TestSubstitutedSnapshotRefused is issue 30's compromised node: holding
// the snapshot store, it replaces counter-1's snapshot with counter-2's
// (counted to 7), files and manifest consistent, under counter-1's
// reference. counter-1's next resume refuses it (a clear 5xx, the actor
// SUSPENDED at the snapshot its record names, the message naming the
// digest), so counter-1 never answers with counter-2's past; once its
// own files are back, it counts on from its own 2.
func TestSubstitutedSnapshotRefused(t *testing.T) {
	in := startUp(t, 2, "--demo")
	in.mustCount("default/counter-1", 1)
	in.mustCount("default/counter-1", 2)
	in.ate("create", "actor", "counter-2", "--template", "counter")
	for i := 1; i <= 7; i++ {
		in.mustCount("default/counter-2", i)
	}
	in.ate("suspend", "actor", "counter-1")
	in.ate("suspend", "actor", "counter-2")
	victim := in.actor("counter-1").GetSnapshot()
	dir := func(ref string) string { return filepath.Join(in.dataDir, "snapshots", snapshot.Bare(ref)) }

	// The attacker's copy of counter-2's past, relabelled as counter-1's.
	kept := dir(victim) + ".kept"
	if err := os.Rename(dir(victim), kept); err != nil {
		t.Fatal(err)
	}
	src := dir(in.actor("counter-2").GetSnapshot())
	if err := snapshot.CopyTree(dir(victim), src, func(rel string) bool { return rel == snapshot.ManifestName }); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(src, snapshot.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	var m snapshot.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	m.Ref = snapshot.Bare(victim)
	if data, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir(victim), snapshot.ManifestName), data, 0o600); err != nil {
		t.Fatal(err)
	}

	code, body, _, err := in.request(http.MethodGet, "default/counter-1", "/", "")
	if err != nil {
		t.Fatal(err)
	}
	if code < 500 || code == http.StatusInternalServerError || !strings.Contains(body, "could not be resumed") {
		t.Fatalf("request to counter-1 over a substituted snapshot = %d %q, want a clear 5xx (not 500)", code, body)
	}
	a := in.actor("counter-1")
	if a.GetState() != atev1.ActorState_SUSPENDED || a.GetWorker() != "" || a.GetSnapshot() != victim {
		t.Fatalf("after the refused restore: state %v worker %q snapshot %q (recorded %q)", a.GetState(), a.GetWorker(), a.GetSnapshot(), victim)
	}
	if !strings.Contains(a.GetMessage(), "manifest digest") {
		t.Fatalf("actor message %q does not name the digest mismatch", a.GetMessage())
	}
	if busy := in.busyWorkers(); len(busy) > 0 {
		t.Fatalf("workers not FREE after the refused restore: %v", busy)
	}

	// The operator puts counter-1's own snapshot back (e.g. from the
	// bucket's object versions): it resumes where it was, not at 8.
	if err := os.RemoveAll(dir(victim)); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(kept, dir(victim)); err != nil {
		t.Fatal(err)
	}
	in.mustCount("default/counter-1", 3)
}
