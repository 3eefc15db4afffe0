package gvisor

import (
	"os"
	"path/filepath"
	"testing"

	"substrate.dev/ate/internal/sandbox"
)

// TestRestoreSeesRewrittenFiles checks what the node's restore
// notification files (/run/ate/generation, /run/ate/random) rely on: the
// worker's one identity directory is bind-mounted read-only into every
// container, the node rewrites its files in place before each start, and
// a sandbox restored — fresh, or into a container prepared while the files
// still held the old contents (a standby) — reads the new contents even
// though it read the old ones just before its checkpoint, so nothing
// cached in the checkpoint's sentry (dentries, page cache) hides the
// change.
func TestRestoreSeesRewrittenFiles(t *testing.T) {
	r := newRuntime(t)
	w := newSlot(t)
	dir := t.TempDir()
	// Written as the node does: one descriptor kept open, WriteAt at 0
	// and Truncate to the new length.
	f, err := os.OpenFile(filepath.Join(dir, "generation"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	write := func(v string) {
		t.Helper()
		if _, err := f.WriteAt([]byte(v), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(int64(len(v))); err != nil {
			t.Fatal(err)
		}
	}
	mounts := []sandbox.Mount{{Source: dir, Destination: "/run/ate", ReadOnly: true}}
	read := func() string { return mustGet(t, r, w, "/cat?p=/run/ate/generation") }

	write("1000000000000000001")
	spec := newSpec(t, r)
	spec.Mounts = mounts
	runReady(t, r, w, spec)
	if got := read(); got != "1000000000000000001" {
		t.Fatalf("generation at boot = %q", got)
	}
	img := checkpoint(t, r, w, spec.ID)

	for _, tc := range []struct {
		name     string
		prepared bool
		value    string
	}{
		// A standby is created before the node rewrites the files.
		{"into a prepared container, same length", true, "1000000000000000002"},
		{"fresh, same length", false, "1000000000000000003"},
		{"fresh, longer", false, "10000000000000000004"},
		{"into a prepared container, shorter", true, "5"},
	} {
		next := newSpec(t, r)
		next.Mounts = mounts
		if tc.prepared {
			if err := r.Prepare(t.Context(), w, next); err != nil {
				t.Fatalf("%s: Prepare: %v", tc.name, err)
			}
			next.Prepared = true
		}
		write(tc.value)
		if err := r.Restore(t.Context(), w, next, img); err != nil {
			t.Fatalf("%s: Restore: %v", tc.name, err)
		}
		waitReady(t, r, w)
		if got := read(); got != tc.value {
			t.Fatalf("%s: generation after restore = %q, want %q (the host file's current contents)", tc.name, got, tc.value)
		}
		// The next restore is of an image that read this value just
		// before its checkpoint.
		img = checkpoint(t, r, w, next.ID)
	}
}
