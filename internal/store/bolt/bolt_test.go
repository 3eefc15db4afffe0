package bolt

import (
	"context"
	"encoding/json"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"substrate.dev/ate/internal/names"
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
	a := &store.Actor{Atespace: "default", Name: "a", UID: "a-uid", Template: "t", Lifecycle: store.Lifecycle{State: store.Suspended}}
	if err := s.CreateActor(ctx, a); err != nil {
		t.Fatal(err)
	}
	if a, err = s.GetActor(ctx, names.ActorKey{Atespace: "default", Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, w, err := s.ClaimWorker(ctx, a, "n0"); err != nil || w.Name != "w0" {
		t.Fatalf("claim after reopen = %v, %v; want w0", w, err)
	}
}

// TestRecordsWrittenBeforeDecode: records written before the actor's
// lifecycle fields were grouped (store.Lifecycle) and before actor
// references were typed (names.ActorKey) read the same, and are written
// back with the same field names.
func TestRecordsWrittenBeforeDecode(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ate.db")
	s, err := Open(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	oldActor := `{"atespace":"default","name":"a","uid":"a-uid","template":"t","state":"RUNNING","worker":"w0",` +
		`"snapshot":"a-uid/s1","message":"m","version":7,"createTime":"2026-11-30T09:00:00Z",` +
		`"stateTime":"2026-11-30T09:01:00Z","resumes":3,"lastActivity":"2026-11-30T09:02:00Z",` +
		`"reason":"EVICTED","evictedFor":"team/b"}`
	oldWorker := `{"name":"w0","node":"n0","tunnelAddr":"127.0.0.1:1","sandboxClass":"gvisor","actorUid":"a-uid","actor":"default/a"}`
	oldFree := `{"name":"w1","node":"n0","tunnelAddr":"127.0.0.1:2","sandboxClass":"gvisor"}`
	err = s.db.Update(func(tx *bbolt.Tx) error {
		if err := tx.Bucket(bActors).Put([]byte("default/a"), []byte(oldActor)); err != nil {
			return err
		}
		if err := tx.Bucket(bWorkers).Put([]byte("w0"), []byte(oldWorker)); err != nil {
			return err
		}
		return tx.Bucket(bWorkers).Put([]byte("w1"), []byte(oldFree))
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

	a, err := s.GetActor(ctx, names.ActorKey{Atespace: "default", Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	want := store.Lifecycle{State: store.Running, Worker: "w0", Snapshot: "a-uid/s1", Message: "m", Resumes: 3,
		Reason: store.ReasonEvicted, EvictedFor: names.ActorKey{Atespace: "team", Name: "b"}}
	if a.Lifecycle != want || a.Version != 7 || a.UID != "a-uid" ||
		!a.LastActivity.Equal(time.Date(2026, 11, 30, 9, 2, 0, 0, time.UTC)) {
		t.Fatalf("old actor decoded to %+v", a)
	}
	w, err := s.GetWorker(ctx, "w0")
	if err != nil || w.Actor != a.Key() || w.ActorUID != "a-uid" {
		t.Fatalf("old worker decoded to %+v, %v", w, err)
	}
	if free, err := s.GetWorker(ctx, "w1"); err != nil || !free.Free() || !free.Actor.IsZero() {
		t.Fatalf("old free worker decoded to %+v, %v", free, err)
	}

	// Written back: the same field names, and a free worker still
	// carries no actor.
	if _, err := s.UpdateActor(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseWorker(ctx, "w0", "a-uid"); err != nil {
		t.Fatal(err)
	}
	err = s.db.View(func(tx *bbolt.Tx) error {
		if got, want := keysOf(t, tx.Bucket(bActors).Get([]byte("default/a"))), keysOf(t, []byte(oldActor)); !slices.Equal(got, want) {
			t.Errorf("actor written with fields %v, before %v", got, want)
		}
		if got, want := keysOf(t, tx.Bucket(bWorkers).Get([]byte("w0"))), keysOf(t, []byte(oldFree)); !slices.Equal(got, want) {
			t.Errorf("freed worker written with fields %v, a free one before %v", got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// keysOf returns the sorted field names of the JSON object b.
func keysOf(t *testing.T, b []byte) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return slices.Sorted(maps.Keys(m))
}
