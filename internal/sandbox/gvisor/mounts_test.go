package gvisor

import (
	"os"
	"path/filepath"
	"testing"

	"substrate.dev/ate/internal/sandbox"
)

// TestMountsFollowTheRestoreSpec checks what the node relies on for
// identity files and durable volumes: bind mounts are host files, not part
// of the checkpoint, and a restore given other sources for the same
// destinations sees the new sources' contents — so one golden snapshot can
// become many actors, each reading its own /run/ate.
func TestMountsFollowTheRestoreSpec(t *testing.T) {
	r := newRuntime(t)
	w1, w2 := newSlot(t), newSlot(t)
	dirs := map[string]string{}
	for _, n := range []string{"idA", "idB", "volA", "volB"} {
		dirs[n] = t.TempDir()
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dirs["idA"], "actor-name"), []byte("golden"), 0o644))
	must(os.WriteFile(filepath.Join(dirs["idB"], "actor-name"), []byte("actor-b"), 0o644))

	spec := newSpec(t, r)
	spec.Mounts = []sandbox.Mount{
		{Source: dirs["idA"], Destination: "/run/ate", ReadOnly: true},
		{Source: dirs["volA"], Destination: "/data"},
	}
	runReady(t, r, w1, spec)
	if got := mustGet(t, r, w1, "/cat?p=/run/ate/actor-name"); got != "golden" {
		t.Fatalf("identity before checkpoint = %q", got)
	}
	mustGet(t, r, w1, "/put?p=/data/note&v=written-in-sandbox")
	if b, _ := os.ReadFile(filepath.Join(dirs["volA"], "note")); string(b) != "written-in-sandbox" {
		t.Fatalf("volume write did not reach the host: %q", b)
	}
	mustGet(t, r, w1, "/")
	img := checkpoint(t, r, w1, spec.ID)

	// The durable volume moves as host files: copy it, change it.
	must(os.WriteFile(filepath.Join(dirs["volB"], "note"), []byte("changed-on-host"), 0o644))
	spec2 := newSpec(t, r)
	spec2.Mounts = []sandbox.Mount{
		{Source: dirs["idB"], Destination: "/run/ate", ReadOnly: true},
		{Source: dirs["volB"], Destination: "/data"},
	}
	if err := r.Restore(t.Context(), w2, spec2, img); err != nil {
		t.Fatalf("Restore with other mount sources: %v", err)
	}
	waitReady(t, r, w2)
	if got := mustGet(t, r, w2, "/cat?p=/run/ate/actor-name"); got != "actor-b" {
		t.Fatalf("identity after restore = %q, want the restore spec's", got)
	}
	if got := mustGet(t, r, w2, "/cat?p=/data/note"); got != "changed-on-host" {
		t.Fatalf("volume after restore = %q, want the restore source's", got)
	}
	if got := mustGet(t, r, w2, "/"); got != "2" {
		t.Fatalf("counter after restore = %q, want 2 (memory kept)", got)
	}
}
