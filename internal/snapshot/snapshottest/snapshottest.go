// Package snapshottest is the conformance suite of snapshot.Store: what
// every snapshot store (Local, the S3 store) must do alike.
package snapshottest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"substrate.dev/ate/internal/snapshot"
)

// Run runs the suite; newStore returns an empty store for one subtest.
func Run(t *testing.T, newStore func(t *testing.T) snapshot.Store) {
	t.Run("CommitThenOpen", func(t *testing.T) { commitThenOpen(t, newStore(t)) })
	t.Run("DeleteAndList", func(t *testing.T) { deleteAndList(t, newStore(t)) })
	t.Run("BadRefs", func(t *testing.T) { badRefs(t, newStore(t)) })
	t.Run("ImportDataScope", func(t *testing.T) { importDataScope(t, newStore(t)) })
	t.Run("ClearStaging", func(t *testing.T) { clearStaging(t, newStore(t)) })
	t.Run("CloneIndependent", func(t *testing.T) { cloneIndependent(t, newStore(t)) })
	t.Run("SubstitutedRefused", func(t *testing.T) { substitutedRefused(t, newStore(t)) })
}

var files = map[string][]byte{
	"checkpoint.img":          []byte("image"),
	"pages.img":               bytes.Repeat([]byte{0, 1, 2, 3}, 10000),
	"volumes/data/a/b/c.txt":  []byte("nested"),
	"volumes/data/empty-file": {},
}

func stageFiles(t *testing.T, s snapshot.Store, owner string) *snapshot.Staged {
	t.Helper()
	st, err := s.Stage(owner, "")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		p := filepath.Join(st.Dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

func commit(t *testing.T, s snapshot.Store, owner string) string {
	t.Helper()
	ref, err := s.Commit(context.Background(), stageFiles(t, s, owner), snapshot.ScopeFull)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

func commitThenOpen(t *testing.T, s snapshot.Store) {
	ctx := context.Background()
	st := stageFiles(t, s, "a-uid")
	if _, err := s.Open(ctx, "a-uid/"+st.ID); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("staged snapshot visible before Commit: %v", err)
	}
	if _, err := s.Committed(ctx, "a-uid/"+st.ID); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("Committed of a staged snapshot = %v, want ErrNotFound", err)
	}
	ref, err := s.Commit(ctx, st, snapshot.ScopeFull)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Committed(ctx, ref); err != nil || got != ref {
		t.Fatalf("Committed after Commit = %q, %v; want %q", got, err, ref)
	}
	if got, err := s.Committed(ctx, snapshot.Bare(ref)); err != nil || got != ref {
		t.Fatalf("Committed of the bare reference = %q, %v; want %q (with its digest)", got, err, ref)
	}
	if bare, digest, err := snapshot.ParseRef(ref); err != nil || bare != "a-uid/"+st.ID || digest == "" {
		t.Fatalf("ref %q (%v), want a-uid/%s with a digest", ref, err, st.ID)
	}
	o, err := s.Open(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(o.Dir, filepath.FromSlash(name)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, %v; want %d", name, len(got), err, len(want))
		}
	}
	if o.Manifest.Ref != snapshot.Bare(ref) || o.Manifest.Scope != snapshot.ScopeFull || len(o.Manifest.Files) != len(files) {
		t.Errorf("manifest %+v", o.Manifest)
	}
}

func deleteAndList(t *testing.T, s snapshot.Store) {
	ctx := context.Background()
	a1, a2, b1 := commit(t, s, "a-uid"), commit(t, s, "a-uid"), commit(t, s, "b-uid")
	refs, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(refs)
	bare := func(refs ...string) []string {
		for i, r := range refs {
			refs[i] = snapshot.Bare(r)
		}
		return slices.Sorted(slices.Values(refs))
	}
	if want := bare(a1, a2, b1); !slices.Equal(refs, want) {
		t.Fatalf("List = %v, want %v", refs, want)
	}
	for range 2 { // deleting a missing ref succeeds
		if err := s.Delete(ctx, a1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Open(ctx, a1); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("Open after Delete = %v", err)
	}
	if err := s.DeleteOwner(ctx, "a-uid"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(ctx, a2); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("Open after DeleteOwner = %v", err)
	}
	if refs, err := s.List(ctx); err != nil || !slices.Equal(refs, bare(b1)) {
		t.Fatalf("List = %v, %v; want [%s]", refs, err, b1)
	}
}

func badRefs(t *testing.T, s snapshot.Store) {
	ctx := context.Background()
	for _, ref := range []string{"", "a", "a/", "/b", "../x", "a/../b", ".staging/x", "a/b/c", "a-uid/20260101T000000Z-0000000000000000",
		"a/b@", "a/b@sha256:", "a/b@md5:00", "a/b@sha256:zz"} {
		if _, err := s.Open(ctx, ref); !errors.Is(err, snapshot.ErrNotFound) {
			t.Errorf("Open(%q) = %v, want ErrNotFound", ref, err)
		}
	}
	for _, owner := range []string{"", "a/b", ".staging"} {
		if _, err := s.Stage(owner, ""); err == nil {
			t.Errorf("Stage(%q) accepted", owner)
		}
		if err := s.DeleteOwner(ctx, owner); err == nil {
			t.Errorf("DeleteOwner(%q) accepted", owner)
		}
	}
}

func importDataScope(t *testing.T, s snapshot.Store) {
	ctx := context.Background()
	paused, err := snapshot.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	src, err := paused.Open(ctx, commit(t, paused, "a-uid"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ref, err := s.Import(ctx, "a-uid", "", src.Dir, snapshot.ScopeData)
	if err != nil {
		t.Fatal(err)
	}
	o, err := s.Open(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	var names []string
	for _, f := range o.Manifest.Files {
		names = append(names, f.Name)
	}
	slices.Sort(names)
	if want := []string{"volumes/data/a/b/c.txt", "volumes/data/empty-file"}; o.Manifest.Scope != snapshot.ScopeData || !slices.Equal(names, want) {
		t.Fatalf("imported %s with %v; want only the volumes %v", o.Manifest.Scope, names, want)
	}
}

func clearStaging(t *testing.T, s snapshot.Store) {
	ctx := context.Background()
	st := stageFiles(t, s, "a-uid")
	ref := commit(t, s, "a-uid")
	if err := s.ClearStaging(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(st.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("staged directory survived ClearStaging: %v", err)
	}
	o, err := s.Open(ctx, ref)
	if err != nil {
		t.Fatalf("committed snapshot gone after ClearStaging: %v", err)
	}
	o.Close()
	if _, err := s.Stage("a-uid", ""); err != nil {
		t.Fatalf("Stage after ClearStaging: %v", err)
	}
}
