package node

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"substrate.dev/ate/internal/sandbox/fake"
	"substrate.dev/ate/internal/snapshot"
)

// TestStartVolumesFrom: a start restoring one snapshot (another
// template's golden, say) with VolumesFrom another fills the volumes
// from VolumesFrom only: how an actor moved to another template keeps its
// data and not the other snapshot's. A VolumesFrom that does not exist
// fails the start.
func TestStartVolumesFrom(t *testing.T) {
	rt := fake.New(fake.Config{})
	n := newTestNode(t, rt)
	ctx := t.Context()
	w, vol, refA, _ := checkpointed(t, n, rt) // a's volume holds "mine"
	if err := n.Start(ctx, StartRequest{Worker: w, ActorUID: "g", Atespace: "ns", Name: "g", Spec: template("img1")}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vol, "golden"), []byte("g's"), 0o600); err != nil {
		t.Fatal(err)
	}
	refG, err := n.Checkpoint(ctx, w, "g", CheckpointOptions{Scope: snapshot.ScopeFull})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctx, StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1"),
		Snapshot: refG, VolumesFrom: refA}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(vol, "mine"))
	if err != nil || string(got) != "a's" {
		t.Fatalf("volume file mine = %q, %v; want a's own", got, err)
	}
	if _, err := os.Stat(filepath.Join(vol, "golden")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the restored snapshot's own volume copy leaked in: %v", err)
	}
	if err := n.Stop(ctx, w, "a"); err != nil {
		t.Fatal(err)
	}
	err = n.Start(ctx, StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1"),
		Snapshot: refG, VolumesFrom: "a/missing"})
	if !errors.Is(err, ErrStartFailed) {
		t.Fatalf("start with a missing VolumesFrom = %v, want ErrStartFailed", err)
	}
}
