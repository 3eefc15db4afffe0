package nodeagent

import (
	"path/filepath"
	"testing"
	"time"

	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/store/bolt"
)

// TestWorkerOfANodeNotHeardYetIsNotLost: a replica over a shared store
// that started before a node registered its workers with another
// replica knows nothing of them. Such a worker is not lost (its actor's
// sandbox may well run there): the replica finds it in the store and
// waits for its node as for any node known only from the store. Only a
// worker the store does not have is.
func TestWorkerOfANodeNotHeardYetIsNotLost(t *testing.T) {
	st, err := bolt.Open(filepath.Join(t.TempDir(), "ate.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	reg, err := NewRegistry(t.Context(), RegistryConfig{Store: st, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	// Registered with another replica after this one started.
	if err := st.PutWorker(t.Context(), &store.Worker{Name: "n1-w0", Node: "n1", TunnelAddr: "10.0.0.1:7071"}); err != nil {
		t.Fatal(err)
	}
	if reg.Lost("n1-w0") {
		t.Fatal("a worker the store has, of a node this replica has not heard yet, was taken for lost")
	}
	if !reg.Lost("n9-w0") {
		t.Fatal("a worker the store does not have was not taken for lost")
	}
	nodes, err := reg.List(t.Context())
	if err != nil || len(nodes) != 1 || nodes[0].GetName() != "n1" {
		t.Fatalf("nodes after the lookup: %v, %v; want n1, known from the store", nodes, err)
	}
}
