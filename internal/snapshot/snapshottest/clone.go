package snapshottest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"substrate.dev/ate/internal/snapshot"
)

// cloneIndependent: a clone holds src's files under its own ref and
// manifest, and outlives src's owner being deleted.
func cloneIndependent(t *testing.T, s snapshot.Store) {
	ctx := context.Background()
	src := commit(t, s, "a-uid")
	ref, err := s.Clone(ctx, src, "tag-uid", "")
	if err != nil {
		t.Fatal(err)
	}
	if owner, _, _ := snapshot.SplitRef(ref); owner != "tag-uid" {
		t.Fatalf("clone ref %q, want owner tag-uid", ref)
	}
	if err := s.DeleteOwner(ctx, "a-uid"); err != nil {
		t.Fatal(err)
	}
	o, err := s.Open(ctx, ref)
	if err != nil {
		t.Fatalf("open clone after its source's owner was deleted: %v", err)
	}
	defer o.Close()
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(o.Dir, filepath.FromSlash(name)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, %v; want %d", name, len(got), err, len(want))
		}
	}
	if o.Manifest.Ref != snapshot.Bare(ref) || o.Manifest.Scope != snapshot.ScopeFull {
		t.Errorf("clone manifest ref %q scope %v, want %q Full", o.Manifest.Ref, o.Manifest.Scope, ref)
	}
	if _, err := s.Clone(ctx, "a-uid/20260101T000000.000Z-0000000000000000", "x-uid", ""); !errors.Is(err, snapshot.ErrNotFound) {
		t.Errorf("Clone of a missing snapshot = %v, want ErrNotFound", err)
	}
}
