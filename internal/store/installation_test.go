package store_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/store/bolt"
)

// TestTakeInstallation: one installation holds a database at a time (a
// restarted one takes its own lease back), and a database of other
// nodes' workers is the replicas', refused with the lease left free.
func TestTakeInstallation(t *testing.T) {
	for _, c := range []struct {
		name string
		// heldBy takes the lease first ("": nobody); the database holds a
		// worker of workersOf ("": none).
		heldBy, workersOf string
		wantErr           string
	}{
		{name: "free"},
		{name: "own workers", workersOf: "local"},
		{name: "restarted holder", heldBy: "host:/data"},
		{name: "another installation", heldBy: "other:/data", wantErr: "another `ate up` uses this database"},
		{name: "replicas' database", workersOf: "node-1", wantErr: "used by `ate apiserver` replicas"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			st, err := bolt.Open(filepath.Join(t.TempDir(), "ate.db"), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			if c.heldBy != "" {
				if _, err := store.TakeInstallation(ctx, st, c.heldBy, "local"); err != nil {
					t.Fatal(err)
				}
			}
			if c.workersOf != "" {
				if err := st.PutWorker(ctx, &store.Worker{Name: "w0", Node: c.workersOf}); err != nil {
					t.Fatal(err)
				}
			}
			in, err := store.TakeInstallation(ctx, st, "host:/data", "local")
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("TakeInstallation: %v", err)
				}
				if err := in.Release(ctx); err != nil {
					t.Fatal(err)
				}
			} else if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("TakeInstallation: %v, want an error saying %q", err, c.wantErr)
			}
			// Released, or left free by a refusal: only another
			// installation's lease is still held.
			if _, err := st.AcquireLease(ctx, "installation/ate-up", "third:/data", time.Second); errors.Is(err, store.ErrLeaseHeld) != (c.heldBy == "other:/data") {
				t.Errorf("the lease after: %v", err)
			}
		})
	}
}

// TestInstallationRenewEndsWithContext: Renew returns once its context
// ends.
func TestInstallationRenewEndsWithContext(t *testing.T) {
	st, err := bolt.Open(filepath.Join(t.TempDir(), "ate.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	in, err := store.TakeInstallation(t.Context(), st, "host:/data", "local")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { in.Renew(ctx, nil); close(done) }()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Renew still running after its context ended")
	}
}
