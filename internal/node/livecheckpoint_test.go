package node

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"substrate.dev/ate/internal/sandbox/fake"
	"substrate.dev/ate/internal/snapshot"
)

// TestCheckpointLeaveRunning: a checkpoint with LeaveRunning writes a
// durable snapshot owned by Owner, holding the volume, and the actor runs
// on in its worker; a restore of that snapshot under another actor gets
// the volume. A paused one is refused.
func TestCheckpointLeaveRunning(t *testing.T) {
	rt := fake.New(fake.Config{})
	n := newTestNode(t, rt)
	ctx := t.Context()
	w := n.order[0]
	vol := n.workerDir(n.slots[w], "volumes", "data")
	if err := n.Start(ctx, StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1")}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vol, "note"), []byte("a's"), 0o600); err != nil {
		t.Fatal(err)
	}
	id, _ := rt.Container(w)
	ref, err := n.Checkpoint(ctx, w, "a", CheckpointOptions{LeaveRunning: true, Owner: "tag-uid"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ref, "tag-uid/") {
		t.Fatalf("ref %q, want owner tag-uid", ref)
	}
	if now, _ := rt.Container(w); now != id || n.Hosted()[w] != "a" {
		t.Fatalf("after the checkpoint worker %s runs %q hosting %q, want %s hosting a", w, now, n.Hosted()[w], id)
	}
	if _, err := n.Checkpoint(ctx, w, "a", CheckpointOptions{LeaveRunning: true, Paused: true}); err == nil {
		t.Fatal("a paused checkpoint leaving the actor running was accepted")
	}
	if err := n.Stop(ctx, w, "a"); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctx, StartRequest{Worker: w, ActorUID: "f", Atespace: "ns", Name: "f", Spec: template("img1"), Snapshot: ref}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(vol, "note"))
	if err != nil || string(got) != "a's" {
		t.Fatalf("fork's volume note = %q, %v; want a's", got, err)
	}
	o, err := n.cfg.Snapshots.Open(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if o.Manifest.Scope != snapshot.ScopeFull {
		t.Fatalf("scope %v", o.Manifest.Scope)
	}
}

// TestVolumeLimit: an actor that makes its volume huge (a 1 TiB sparse
// file costs it one ftruncate) fails its checkpoints, live or not, with
// an error naming the node's limit, and leaves nothing staged behind.
func TestVolumeLimit(t *testing.T) {
	rt := fake.New(fake.Config{})
	n := newTestNode(t, rt)
	n.cfg.VolumeLimits = snapshot.Limits{Bytes: 1 << 20, Entries: 100}
	ctx := t.Context()
	w := n.order[0]
	vol := n.workerDir(n.slots[w], "volumes", "data")
	if err := n.Start(ctx, StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1")}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vol, "huge"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(vol, "huge"), 1<<40); err != nil {
		t.Fatal(err)
	}
	for _, opts := range []CheckpointOptions{{LeaveRunning: true, Owner: "tag-uid"}, {Scope: snapshot.ScopeFull}} {
		_, err := n.Checkpoint(ctx, w, "a", opts)
		if !errors.Is(err, snapshot.ErrTooLarge) || !strings.Contains(err.Error(), "--max-volume-bytes 1048576") {
			t.Fatalf("checkpoint %+v of a 1 TiB volume: %v, want ErrTooLarge naming --max-volume-bytes", opts, err)
		}
	}
	// newTestNodeWith's stores live beside the state directory.
	for _, store := range []string{"snapshots", "paused"} {
		if got := snapshot.TreeSize(filepath.Join(filepath.Dir(n.cfg.StateDir), store)); got > 1<<20 {
			t.Errorf("%s holds %d bytes after the refused checkpoints", store, got)
		}
	}
}
