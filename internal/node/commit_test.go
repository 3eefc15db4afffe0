package node

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

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
