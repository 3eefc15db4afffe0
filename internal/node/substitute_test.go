package node

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"substrate.dev/ate/internal/sandbox/fake"
	"substrate.dev/ate/internal/snapshot"
)

// TestStartRefusesSubstitutedSnapshot: a compromised node, holding the
// snapshot store's credentials as every node does, rewrites actor a's
// snapshot under a's recorded reference with files and a manifest of its
// own that agree with each other. Restoring the recorded reference fails
// with snapshot.ErrCorrupt, and nothing of the forgery reaches a's
// volume: a is never started from a snapshot its record did not name.
func TestStartRefusesSubstitutedSnapshot(t *testing.T) {
	rt := fake.New(fake.Config{})
	n := newTestNode(t, rt)
	ctx := t.Context()
	w, vol, ref, _ := checkpointed(t, n, rt) // a's volume holds "mine"

	store := n.cfg.Snapshots
	_, id, err := snapshot.SplitRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	o, err := store.Open(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	src := o.Dir
	defer o.Close()
	if err := os.Rename(src, src+".orig"); err != nil { // the attacker's Delete, keeping the files to copy
		t.Fatal(err)
	}
	st, err := store.Stage("a", id)
	if err != nil {
		t.Fatal(err)
	}
	if err := snapshot.CopyTree(st.Dir, src+".orig", func(rel string) bool { return rel == snapshot.ManifestName }); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(st.Dir, snapshot.VolumesDir, "data", "mine"), []byte("planted!"), 0o600); err != nil {
		t.Fatal(err)
	}
	forged, err := store.Commit(ctx, st, snapshot.ScopeFull)
	if err != nil {
		t.Fatal(err)
	}
	if snapshot.Bare(forged) != snapshot.Bare(ref) {
		t.Fatalf("forgery at %s, a's snapshot at %s", forged, ref)
	}

	err = n.Start(ctx, StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1"), Snapshot: ref})
	if !errors.Is(err, ErrStartFailed) || !errors.Is(err, snapshot.ErrCorrupt) {
		t.Fatalf("start from the rewritten snapshot = %v, want ErrStartFailed wrapping ErrCorrupt", err)
	}
	if got, err := os.ReadFile(filepath.Join(vol, "mine")); err == nil {
		t.Fatalf("a's volume holds %q after the refused start", got)
	}
	if id, ok := rt.Container(w); ok {
		t.Fatalf("container %s runs on %s after the refused start", id, w)
	}
}
