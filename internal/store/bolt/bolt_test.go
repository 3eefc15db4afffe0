package bolt

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := Open(filepath.Join(t.TempDir(), "ate.db"), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestOpenRebuildsFreeIndex: the free-worker index is rebuilt at Open, so
// a file whose index was keyed by worker name alone (before node-scoped
// claims) still claims correctly.
func TestOpenRebuildsFreeIndex(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ate.db")
	s, err := Open(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutWorker(ctx, &store.Worker{Name: "w0", Node: "n0"}); err != nil {
		t.Fatal(err)
	}
	// The old layout: key = worker name.
	err = s.db.Update(func(tx *bbolt.Tx) error {
		if err := tx.DeleteBucket(bFree); err != nil {
			return err
		}
		b, err := tx.CreateBucket(bFree)
		if err != nil {
			return err
		}
		return b.Put([]byte("w0"), nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path, time.Second); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateAtespace(ctx, &store.Atespace{Name: "default"}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTemplate(ctx, &store.Template{Atespace: "default", Name: "t", UID: "t-uid"}); err != nil {
		t.Fatal(err)
	}
	a := &store.Actor{Atespace: "default", Name: "a", UID: "a-uid", Template: "t", State: store.Suspended}
	if err := s.CreateActor(ctx, a); err != nil {
		t.Fatal(err)
	}
	if a, err = s.GetActor(ctx, "default", "a"); err != nil {
		t.Fatal(err)
	}
	if _, w, err := s.ClaimWorker(ctx, a, "n0"); err != nil || w.Name != "w0" {
		t.Fatalf("claim after reopen = %v, %v; want w0", w, err)
	}
}
