package snapshot

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestImportLinksOnOneFilesystem: an upload of a paused checkpoint shares
// its files with the paused copy when both stores are on one filesystem,
// survives the paused copy's deletion, and is a copy across filesystems
// (the paused store on /dev/shm, a tmpfs).
func TestImportLinksOnOneFilesystem(t *testing.T) {
	shm, err := os.MkdirTemp("/dev/shm", "ate-snapshot-test-")
	if err != nil {
		t.Fatalf("a directory on another filesystem: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	for _, tc := range []struct {
		name, pausedDir string
		linked          bool
	}{
		{"same filesystem", t.TempDir(), true},
		{"other filesystem", shm, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			paused, err := NewLocal(filepath.Join(tc.pausedDir, "paused"))
			if err != nil {
				t.Fatal(err)
			}
			st, err := paused.Stage("a-uid", "")
			if err != nil {
				t.Fatal(err)
			}
			files := map[string]string{"pages.img": "pages", VolumesDir + "/data/note": "note"}
			for name, content := range files {
				p := filepath.Join(st.Dir, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			pref, err := paused.Commit(ctx, st, ScopeFull)
			if err != nil {
				t.Fatal(err)
			}
			po, err := paused.Open(ctx, pref)
			if err != nil {
				t.Fatal(err)
			}
			durable, err := NewLocal(filepath.Join(t.TempDir(), "durable"))
			if err != nil {
				t.Fatal(err)
			}
			ref, err := durable.Import(ctx, "a-uid", "", po.Dir, ScopeFull)
			if err != nil {
				t.Fatal(err)
			}
			o, err := durable.Open(ctx, ref)
			if err != nil {
				t.Fatal(err)
			}
			for name := range files {
				a, err := os.Stat(filepath.Join(po.Dir, name))
				if err != nil {
					t.Fatal(err)
				}
				b, err := os.Stat(filepath.Join(o.Dir, name))
				if err != nil {
					t.Fatal(err)
				}
				if os.SameFile(a, b) != tc.linked {
					t.Errorf("%s: shared with the paused copy = %v, want %v", name, !tc.linked, tc.linked)
				}
			}
			if err := paused.Delete(ctx, pref); err != nil {
				t.Fatal(err)
			}
			if _, err := durable.Open(ctx, ref); err != nil {
				t.Fatalf("upload after the paused copy's deletion: %v", err)
			}
			for name, content := range files {
				if got, err := os.ReadFile(filepath.Join(o.Dir, name)); err != nil || string(got) != content {
					t.Errorf("%s = %q, %v; want %q", name, got, err, content)
				}
			}
		})
	}
}
