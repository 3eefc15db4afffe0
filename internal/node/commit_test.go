package node

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"substrate.dev/ate/internal/sandbox/fake"
	"substrate.dev/ate/internal/snapshot"
)

// failingCommits is a snapshot store whose first fail commits fail, as
// an object store answering 503 SlowDown for a while does.
type failingCommits struct {
	snapshot.Store
	fail  atomic.Int32
	tries atomic.Int32
}

func (f *failingCommits) Commit(ctx context.Context, st *snapshot.Staged, scope snapshot.Scope) (string, error) {
	f.tries.Add(1)
	if f.fail.Add(-1) >= 0 {
		return "", errors.New("SlowDown: Please reduce your request rate")
	}
	return f.Store.Commit(ctx, st, scope)
}

// TestCheckpointOutlivesAStoreOutage: a suspend's checkpoint whose commit
// fails for a while is committed once the store answers again, not given
// up: the container is gone by then, and the staged checkpoint is the
// only copy of what the actor did since its last snapshot.
func TestCheckpointOutlivesAStoreOutage(t *testing.T) {
	rt := fake.New(fake.Config{})
	n := newTestNode(t, rt)
	store := &failingCommits{Store: n.cfg.Snapshots}
	store.fail.Store(3)
	n.cfg.Snapshots = store
	ctx := t.Context()
	w := n.order[0]
	if err := n.Start(ctx, StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1")}); err != nil {
		t.Fatal(err)
	}
	ref, err := n.Checkpoint(ctx, w, "a", CheckpointOptions{})
	if err != nil {
		t.Fatalf("checkpoint through a store outage of 3 commits: %v", err)
	}
	if got := store.tries.Load(); got != 4 {
		t.Fatalf("%d commits tried, want 4", got)
	}
	if err := n.Start(ctx, StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1"), Snapshot: ref}); err != nil {
		t.Fatalf("restore of the snapshot committed after the outage: %v", err)
	}
}

// TestRepeatedCheckpointLeavesTheSandbox: a checkpoint request under a
// snapshot id that is already committed (a first request delayed in the
// network, arriving after the control plane asked again under the same
// id, and the actor was resumed on this worker since) is refused as
// stale: the sandbox keeps running and the committed snapshot is left as
// it is.
func TestRepeatedCheckpointLeavesTheSandbox(t *testing.T) {
	rt := fake.New(fake.Config{})
	n := newTestNode(t, rt)
	ctx := t.Context()
	w := n.order[0]
	startA(t, n, w, "", false)
	id := snapshot.NewID()
	ref, err := n.Checkpoint(ctx, w, "a", CheckpointOptions{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	startA(t, n, w, ref, false)
	// Bounded: without the refusal the repeated commit fails and is
	// retried for as long as its context lasts.
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := n.Checkpoint(rctx, w, "a", CheckpointOptions{ID: id}); !errors.Is(err, ErrStale) {
		t.Fatalf("a repeated checkpoint under committed id %s = %v, want ErrStale", id, err)
	}
	if !n.slots[w].gate.hosts("a") {
		t.Fatal("the repeated checkpoint stopped the sandbox the actor runs in now")
	}
	if _, err := n.cfg.Snapshots.Committed(ctx, ref); err != nil {
		t.Fatalf("the committed snapshot after the repeated request: %v", err)
	}
}

// TestRepeatedPauseAnswersItsCheckpoint: a pause asked again under the id
// of one that finished here (its answer, or the PAUSED write, was lost)
// is answered with the checkpoint committed then, whether the worker is
// empty or hosts the actor again; the sandbox is left alone. A new id on
// an empty worker is still stale.
func TestRepeatedPauseAnswersItsCheckpoint(t *testing.T) {
	rt := fake.New(fake.Config{})
	n := newTestNode(t, rt)
	ctx := t.Context()
	w := n.order[0]
	startA(t, n, w, "", true)
	id := snapshot.NewID()
	ref, err := n.Checkpoint(ctx, w, "a", CheckpointOptions{Paused: true, ID: id})
	if err != nil {
		t.Fatal(err)
	}
	again, err := n.Checkpoint(ctx, w, "a", CheckpointOptions{Paused: true, ID: id})
	if err != nil || again != ref {
		t.Fatalf("the pause asked again on the emptied worker = %q, %v; want %q", again, err, ref)
	}
	for _, other := range []string{snapshot.NewID(), "../" + id, ".." + id} {
		// Another id, or one that names a path beside the checkpoint's,
		// finds nothing committed: the emptied worker is stale.
		if got, err := n.Checkpoint(ctx, w, "a", CheckpointOptions{Paused: true, ID: other}); !errors.Is(err, ErrStale) {
			t.Fatalf("a pause under id %q on the emptied worker = %q, %v; want ErrStale", other, got, err)
		}
	}
	startA(t, n, w, ref, true)
	again, err = n.Checkpoint(ctx, w, "a", CheckpointOptions{Paused: true, ID: id})
	if err != nil || again != ref {
		t.Fatalf("the pause asked again once the actor runs there again = %q, %v; want %q", again, err, ref)
	}
	if !n.slots[w].gate.hosts("a") {
		t.Fatal("the repeated pause stopped the sandbox the actor runs in now")
	}
}

// TestRepeatedCheckpointAfterItsSnapshotIsGone: a request repeated under
// the id of a checkpoint committed here is refused as stale even once
// that checkpoint has been deleted (a resume deletes a paused one, a
// later suspend the snapshot before it) and the actor runs on the same
// worker again: it must not checkpoint, and so stop, the running actor.
func TestRepeatedCheckpointAfterItsSnapshotIsGone(t *testing.T) {
	for _, paused := range []bool{false, true} {
		t.Run(fmt.Sprintf("paused=%v", paused), func(t *testing.T) {
			rt := fake.New(fake.Config{})
			n := newTestNode(t, rt)
			ctx := t.Context()
			w := n.order[0]
			startA(t, n, w, "", paused)
			id := snapshot.NewID()
			ref, err := n.Checkpoint(ctx, w, "a", CheckpointOptions{Paused: paused, ID: id})
			if err != nil {
				t.Fatal(err)
			}
			startA(t, n, w, ref, paused)
			store := n.cfg.Snapshots
			if paused {
				store = n.cfg.Paused
			}
			if err := store.Delete(ctx, ref); err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if _, err := n.Checkpoint(rctx, w, "a", CheckpointOptions{Paused: paused, ID: id}); !errors.Is(err, ErrStale) {
				t.Fatalf("a repeated checkpoint under id %s, its snapshot deleted = %v, want ErrStale", id, err)
			}
			if !n.slots[w].gate.hosts("a") {
				t.Fatal("the repeated checkpoint stopped the sandbox the actor runs in now")
			}
		})
	}
}

// startA starts actor "a" (template img1) on worker w of n, from snap
// (none: a boot), a paused checkpoint when paused.
func startA(t *testing.T, n *Node, w, snap string, paused bool) {
	t.Helper()
	req := StartRequest{Worker: w, ActorUID: "a", Atespace: "ns", Name: "a", Spec: template("img1"), Snapshot: snap, Paused: paused && snap != ""}
	if err := n.Start(t.Context(), req); err != nil {
		t.Fatal(err)
	}
}
