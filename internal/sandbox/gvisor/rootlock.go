package gvisor

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/gofrs/flock"
)

// ErrRootInUse: another process holds a runsc root's lock (LockRoot).
var ErrRootInUse = errors.New("runsc root in use by another process")

// LockRoot makes this process the only one using rootDir (Config.RootDir)
// until unlock. A node's start-up clears what a dead predecessor left
// under its root, and in the network namespaces named like it; a second
// process over the same root would clear a live one's. The lock is the
// file rootDir+".lock", created with rootDir's parent. unlock removes it,
// so a clean exit leaves nothing beside the root, while still holding
// it: a process that locked the removed file in between finds that its
// file is no longer the path's, and refuses as if the lock were held.
// Errors: ErrRootInUse, or the file system's.
func LockRoot(rootDir string) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(rootDir), 0o700); err != nil {
		return nil, err
	}
	lock := flock.New(rootDir + ".lock")
	ok, err := lock.TryLock()
	if err != nil {
		return nil, err
	}
	if !ok || !lockIsPath(lock) {
		_ = lock.Unlock()
		return nil, ErrRootInUse
	}
	return func() { _ = os.Remove(lock.Path()); _ = lock.Unlock() }, nil
}

// lockIsPath reports whether the file lock holds is still the one at its
// path: the owner removes the file on exit while holding it, so a lock
// won on a removed file is no lock at all.
func lockIsPath(lock *flock.Flock) bool {
	held, err := lock.Stat()
	if err != nil {
		return false
	}
	onDisk, err := os.Stat(lock.Path())
	return err == nil && os.SameFile(held, onDisk)
}
