package lifecycle

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"substrate.dev/ate/internal/snapshot"
)

// TestOrphanCutoff: alone over its store, every snapshot staged before
// the start is a dead workflow's; over a shared store only those older
// than the window are, the rest may be other replicas' in flight.
func TestOrphanCutoff(t *testing.T) {
	since := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		o    OrphanCollection
		want time.Time
	}{
		{"alone", OrphanCollection{Since: since, CheckpointTimeout: 2 * time.Minute}, since},
		{"shared", OrphanCollection{Since: since, Shared: true, CheckpointTimeout: 2 * time.Minute}, since.Add(-3 * time.Minute)},
		{"shared, no checkpoint bound", OrphanCollection{Since: since, Shared: true}, since.Add(-time.Minute)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.o.cutoff(); !got.Equal(c.want) {
				t.Errorf("cutoff = %v, want %v", got, c.want)
			}
		})
	}
}

// TestCollectOrphans: an orphan staged before the start is collected at
// once, one staged after it is left (the process's own workflows record
// or drop it); the collection ends by itself once the window has passed,
// and with its context before that.
func TestCollectOrphans(t *testing.T) {
	for _, c := range []struct {
		name string
		// ago is how long before now the process started: after the
		// snapshot was staged when 0.
		ago time.Duration
		// ends says it returns without its context ending.
		ends bool
	}{
		{"window passed", 2 * time.Hour, true},
		{"within the window", 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			st, err := e.snaps.Stage("a-uid", "")
			must(t, err)
			must(t, os.WriteFile(filepath.Join(st.Dir, "checkpoint.img"), []byte("x"), 0o600))
			orphan, err := e.snaps.Commit(t.Context(), st, snapshot.ScopeFull)
			must(t, err)
			// Staged ids are to the millisecond: a start one millisecond
			// on comes after the snapshot, with no sleep to get there.
			since := time.Now().Add(time.Millisecond - c.ago)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- e.m.CollectOrphans(ctx, OrphanCollection{Since: since, CheckpointTimeout: time.Minute, Interval: time.Hour})
			}()
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
			_, err = e.snaps.Open(t.Context(), orphan)
			if collected := errors.Is(err, snapshot.ErrNotFound); collected != (c.ago == 0) {
				t.Errorf("unreferenced snapshot: %v, want collected %v", err, c.ago == 0)
			}
		})
	}
}
