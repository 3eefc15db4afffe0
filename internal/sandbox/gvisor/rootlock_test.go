package gvisor

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/gofrs/flock"
)

// TestLockRoot: one process per root at a time; unlock frees it and
// leaves no file; a lock won on a file its owner removed is refused.
func TestLockRoot(t *testing.T) {
	for _, c := range []struct {
		name string
		// before runs first, returning what to undo after.
		before  func(t *testing.T, root string) func()
		wantErr error
	}{
		{name: "free", before: func(*testing.T, string) func() { return func() {} }},
		{name: "held", before: func(t *testing.T, root string) func() {
			unlock, err := LockRoot(root)
			if err != nil {
				t.Fatal(err)
			}
			return unlock
		}, wantErr: ErrRootInUse},
		{name: "released", before: func(t *testing.T, root string) func() {
			unlock, err := LockRoot(root)
			if err != nil {
				t.Fatal(err)
			}
			unlock()
			if _, err := os.Stat(root + ".lock"); !os.IsNotExist(err) {
				t.Fatalf("lock file after unlock: %v", err)
			}
			return func() {}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "run", "ate0")
			defer c.before(t, root)()
			unlock, err := LockRoot(root)
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("LockRoot: %v, want %v", err, c.wantErr)
			}
			if err == nil {
				unlock()
			}
		})
	}
}

// TestLockIsPath: a lock on a file no longer at its path (its owner
// removed it on exit) is no lock.
func TestLockIsPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ate0.lock")
	lock := flock.New(path)
	if ok, err := lock.TryLock(); !ok || err != nil {
		t.Fatalf("TryLock: %v, %v", ok, err)
	}
	defer lock.Unlock()
	if !lockIsPath(lock) {
		t.Fatal("a lock on the file at its path is not the path's")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if lockIsPath(lock) {
		t.Error("a lock on a removed file counts as the path's")
	}
}
