package lifecycle

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/store"
)

// stageOrphan commits a snapshot of owner under id ("": one the store
// mints) that nothing points to.
func stageOrphan(t *testing.T, e *env, owner, id string) string {
	t.Helper()
	st, err := e.snaps.Stage(owner, id)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(st.Dir, "checkpoint.img"), []byte("x"), 0o600))
	ref, err := e.snaps.Commit(t.Context(), st, snapshot.ScopeFull)
	must(t, err)
	return ref
}

// TestCollectOrphans: alone over its store, a dead predecessor's orphan
// is collected at once, whatever time its id reads (the predecessor's
// clock is not ours), and a snapshot this process minted is left (its
// workflows record or drop it), and so is an interrupted suspend's
// snapshot that an actor's record names as pending (the next workflow
// adopts it); the collection ends by itself once the
// window has passed, and with its context before that; its first pass
// is announced once.
func TestCollectOrphans(t *testing.T) {
	for _, c := range []struct {
		name string
		o    OrphanCollection
		// ends says it returns without its context ending.
		ends bool
	}{
		{"window passed", OrphanCollection{Interval: time.Hour, margin: time.Nanosecond}, true},
		{"within the window", OrphanCollection{CheckpointTimeout: time.Minute, Interval: time.Hour}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			// An hour ahead of ours, and one this process minted.
			orphan := stageOrphan(t, e, "a-uid", time.Now().Add(time.Hour).UTC().Format("20060102T150405.000Z")+"-0123456789abcdef")
			mine := stageOrphan(t, e, "a-uid", e.m.newSnapshotID())
			pending := stageOrphan(t, e, "a-uid", time.Now().Add(-time.Hour).UTC().Format("20060102T150405.000Z")+"-fedcba9876543210")
			a := e.get(t)
			a.State, a.PendingSnapshot = store.Suspending, pending
			_, err := e.st.UpdateActor(t.Context(), a)
			must(t, err)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			passes := 0 // FirstPassDone's calls: read once done is received
			o := c.o
			o.FirstPassDone = func() { passes++ }
			go func() { done <- e.m.CollectOrphans(ctx, o) }()
			select {
			case err := <-done:
				if !c.ends {
					t.Fatalf("CollectOrphans returned %v within the window", err)
				}
				must(t, err)
			case <-time.After(500 * time.Millisecond):
				if c.ends {
					t.Fatal("CollectOrphans still running after the window")
				}
				cancel()
				must(t, <-done)
			}
			if passes != 1 {
				t.Errorf("FirstPassDone called %d times, want once", passes)
			}
			if _, err := e.snaps.Open(t.Context(), orphan); !errors.Is(err, snapshot.ErrNotFound) {
				t.Errorf("a dead predecessor's orphan: %v, want collected", err)
			}
			if _, err := e.snaps.Open(t.Context(), mine); err != nil {
				t.Errorf("a snapshot this process minted: %v, want left", err)
			}
			if _, err := e.snaps.Open(t.Context(), pending); err != nil {
				t.Errorf("an interrupted suspend's pending snapshot: %v, want left", err)
			}
		})
	}
}

// TestSharedOrphansWaitOutOtherReplicas: over a shared store an
// unreferenced snapshot may be another replica's, staged and about to be
// recorded, with an id minted on that replica's clock, here an hour
// behind ours (it looks old). It is not taken when first found; if it is
// recorded within the window it is never taken; if it stays
// unreferenced for the window it is.
func TestSharedOrphansWaitOutOtherReplicas(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	behind := time.Now().Add(-time.Hour).UTC().Format("20060102T150405.000Z")
	inFlight := stageOrphan(t, e, "a-uid", behind+"-0123456789abcdef")
	orphan := stageOrphan(t, e, "a-uid", behind+"-fedcba9876543210")
	since := map[string]time.Time{}
	must(t, e.m.collectShared(ctx, since, true, time.Hour))
	for _, ref := range []string{inFlight, orphan} {
		if _, err := e.snaps.Open(ctx, ref); err != nil {
			t.Fatalf("%s taken when first found unreferenced: %v", ref, err)
		}
	}
	// The other replica records its snapshot.
	a := e.get(t)
	a.Snapshot = inFlight
	_, err := e.st.UpdateActor(ctx, a)
	must(t, err)
	// A window later (0: every snapshot found has waited it).
	must(t, e.m.collectShared(ctx, since, false, 0))
	if _, err := e.snaps.Open(ctx, inFlight); err != nil {
		t.Fatalf("snapshot recorded within the window taken: %v", err)
	}
	if _, err := e.snaps.Open(ctx, orphan); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("snapshot unreferenced for the window: %v, want taken", err)
	}
	if len(since) != 0 {
		t.Fatalf("still waiting on %v", since)
	}
}
