package up

import (
	"context"
	"strings"
	"testing"

	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/sandbox/fake"
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
