package up

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/sandbox/fake"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/store/postgres/pgtest"
	storeurl "substrate.dev/ate/internal/store/storeurl"
)

// TestExclusiveOverSharedStore: a second `ate up` over the database of a
// running one is refused before it touches anything (it used to
// unregister the first one's workers and crash its actors); once the
// first closes, another starts.
func TestExclusiveOverSharedStore(t *testing.T) {
	pg, err := pgtest.Start(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	db := pg.NewDatabase(t)
	start := func(prefix string) (*ControlPlane, error) {
		rt := fake.New(fake.Config{})
		t.Cleanup(func() { rt.Close() })
		return NewControlPlane(context.Background(), ControlPlaneConfig{DataDir: t.TempDir(), Store: db, Exclusive: true,
			Node: node.Config{Workers: 1, WorkerPrefix: prefix, SandboxClass: fake.Class, Runtime: rt, Setup: fake.Setup, TunnelAddr: "127.0.0.1:0"}})
	}
	first, err := start("ex1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := start("ex2"); err == nil || !strings.Contains(err.Error(), "another `ate up` uses this database") {
		t.Fatalf("second ate up over the same database: %v, want a refusal", err)
	}
	ws, err := first.Store.ListWorkers(t.Context())
	if err != nil || len(ws) != 1 || !strings.HasPrefix(ws[0].Name, "ex1") {
		t.Fatalf("first installation's workers after the refusal: %v, %v", ws, err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	next, err := start("ex3")
	if err != nil {
		t.Fatalf("ate up after the first closed: %v", err)
	}
	if err := next.Close(); err != nil {
		t.Fatal(err)
	}
	// A database whose workers belong to other nodes is the replicas'.
	replicas := pg.NewDatabase(t)
	rs, err := storeurl.Open(t.Context(), replicas, storeurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.PutWorker(t.Context(), &store.Worker{Name: "n1-w0", Node: "node-1"}); err != nil {
		t.Fatal(err)
	}
	_ = rs.Close()
	db = replicas
	if _, err := start("ex4"); err == nil || !strings.Contains(err.Error(), "used by `ate apiserver` replicas") {
		t.Fatalf("ate up over the replicas' database: %v, want a refusal", err)
	}
}

// TestSharedControlPlanesKeepEachOthersSnapshots: control planes that
// share a store (and its snapshot directory) without Exclusive each run
// the start-up collection; a snapshot another one has committed and not
// yet recorded (a golden build or suspend under way) is not an orphan.
// It was: the second control plane's one pass deleted such a template's
// golden snapshot, and every later start of an actor failed with
// "snapshot not found".
func TestSharedControlPlanesKeepEachOthersSnapshots(t *testing.T) {
	pg, err := pgtest.Start(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	db, snaps := pg.NewDatabase(t), t.TempDir()
	open := func(name string) *ControlPlane {
		t.Helper()
		rt := fake.New(fake.Config{})
		t.Cleanup(func() { rt.Close() })
		cp, err := NewControlPlane(t.Context(), ControlPlaneConfig{DataDir: t.TempDir(), Store: db, SnapshotsDir: snaps,
			Node: node.Config{Name: name, Workers: 1, WorkerPrefix: name, SandboxClass: fake.Class, Runtime: rt, Setup: fake.Setup, TunnelAddr: "127.0.0.1:0"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cp.Close() })
		return cp
	}
	first := open("node-a")
	staged, err := first.Snapshots.Stage("tpl-uid", snapshot.NewID())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(staged.Dir, "checkpoint.img"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	inFlight, err := first.Snapshots.Commit(t.Context(), staged, snapshot.ScopeFull)
	if err != nil {
		t.Fatal(err)
	}

	second := open("node-b")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	started := make(chan error, 1)
	go func() { started <- second.Start(ctx) }()
	select {
	case <-second.SnapshotGCDone():
	case err := <-started:
		t.Fatalf("Start returned %v before its collection's first pass", err)
	}
	if _, err := second.Snapshots.Open(t.Context(), inFlight); err != nil {
		t.Fatalf("another control plane's unrecorded snapshot after the start-up collection: %v, want kept", err)
	}
	cancel()
	if err := <-started; err != nil {
		t.Fatalf("Start = %v", err)
	}
}
