package snapshot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestCommitOpenDelete(t *testing.T) {
	ctx := context.Background()
	l, err := NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st, err := l.Stage("actor-uid", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(st.Dir, "pages.img"), []byte("12345"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Not visible before Commit.
	if _, err := l.Open(ctx, "actor-uid/"+st.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("staged snapshot visible: %v", err)
	}
	ref, err := l.Commit(ctx, st, ScopeFull)
	if err != nil {
		t.Fatal(err)
	}
	o, err := l.Open(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	dir := o.Dir
	o.Close()
	if data, _ := os.ReadFile(filepath.Join(dir, "pages.img")); string(data) != "12345" {
		t.Fatalf("content = %q", data)
	}
	// Truncation is detected from the manifest.
	if err := os.WriteFile(filepath.Join(dir, "pages.img"), []byte("1"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Open(ctx, ref); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open of truncated snapshot = %v, want ErrCorrupt", err)
	}
	if err := l.Delete(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Open(ctx, ref); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Open after delete = %v", err)
	}
}

func TestBadRefs(t *testing.T) {
	l, err := NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"", "a", "a/", "/b", "../x", "a/../b", ".staging/x", "a/b/c"} {
		t.Run(ref, func(t *testing.T) {
			if _, err := l.Open(context.Background(), ref); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Open(%q) = %v, want ErrNotFound", ref, err)
			}
		})
	}
	for _, owner := range []string{"", "a/b", ".staging"} {
		if _, err := l.Stage(owner, ""); err == nil {
			t.Fatalf("Stage(%q) accepted", owner)
		}
	}
}

// TestEmptyDirKeepsTheDirectory: a bind mount follows the directory's
// inode, so EmptyDir must empty it in place, nested entries included.
func TestEmptyDirKeepsTheDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	if err := EmptyDir(dir); err != nil {
		t.Fatalf("EmptyDir of a missing dir: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a", "b", "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := EmptyDir(dir); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Fatal("EmptyDir replaced the directory instead of emptying it")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("EmptyDir left %d entries", len(entries))
	}
}

// TestImportDataScopeKeepsOnlyVolumes: a Data-scope upload of a paused
// checkpoint carries its volumes, not its memory image.
func TestImportDataScopeKeepsOnlyVolumes(t *testing.T) {
	ctx := context.Background()
	src, err := NewLocal(filepath.Join(t.TempDir(), "paused"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := src.Stage("a-uid", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"checkpoint.img", VolumesDir + "/data/note"} {
		p := filepath.Join(st.Dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ref, err := src.Commit(ctx, st, ScopeFull)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := src.Open(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := NewLocal(filepath.Join(t.TempDir(), "durable"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := dst.Import(ctx, "a-uid", "", dir.Dir, ScopeData)
	if err != nil {
		t.Fatal(err)
	}
	o, err := dst.Open(ctx, got)
	if err != nil {
		t.Fatal(err)
	}
	if m := o.Manifest; m.Scope != ScopeData || len(m.Files) != 1 || m.Files[0].Name != VolumesDir+"/data/note" {
		t.Fatalf("imported %s with %+v; want only the volume file", o.Dir, m)
	}
}
