package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Clone makes a new snapshot of owner (with id, NewID's form; "" = a new
// one) holding the same files as the complete snapshot src, and returns
// its reference. No bytes are copied: each file of the new snapshot is a
// hard link to src's stored file, compressed or not (committed snapshots are never written in place, so
// the two share their blocks until both are deleted). The new snapshot
// has its own manifest, written last as Commit writes it, so it is
// independent of src from then on: deleting either leaves the other
// whole. Errors wrap ErrNotFound when src is not complete.
func (l *Local) Clone(_ context.Context, src, owner, id string) (string, error) {
	dir, m, err := l.committed(src)
	if err != nil {
		return "", err
	}
	st, err := l.Stage(owner, id)
	if err != nil {
		return "", err
	}
	if err := linkTree(st.Dir, dir, nil); err != nil {
		_ = l.Abort(st)
		return "", fmt.Errorf("clone snapshot %s: %w", src, err)
	}
	ref, err := l.seal(st, m.Scope, m.Files)
	if err != nil {
		_ = l.Abort(st)
		return "", err
	}
	return ref, nil
}

// linkTree recreates src's directories and symlinks under dst and hard
// links its regular files, leaving out src's manifest and the paths
// (relative, slash-separated) for which skip, if not nil, returns true.
// Across filesystems it fails with an error wrapping syscall.EXDEV.
func linkTree(dst, src string, skip func(rel string) bool) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." || rel == ManifestName {
			return err
		}
		if skip != nil && skip(filepath.ToSlash(rel)) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			info, err := d.Info()
			if err != nil {
				return err
			}
			return os.Mkdir(target, info.Mode().Perm()|0o700)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case d.Type().IsRegular():
			return os.Link(p, target)
		default:
			return nil
		}
	})
}

// importLinked is Import by hard links (as Clone makes them) instead of
// copies, for srcDir on the store's filesystem: a node's paused checkpoint
// becomes durable without its image being copied. Like Clone's, the
// files are shared until both snapshots are deleted; committed snapshots
// are never written in place. ok is false, with nothing left behind, when
// srcDir is on another filesystem (EXDEV): the caller copies instead.
func (l *Local) importLinked(ctx context.Context, owner, id, srcDir string, scope Scope) (ref string, ok bool, err error) {
	st, err := l.Stage(owner, id)
	if err != nil {
		return "", true, err
	}
	err = linkTree(st.Dir, srcDir, outsideScope(scope))
	if errors.Is(err, syscall.EXDEV) {
		_ = l.Abort(st)
		return "", false, nil
	}
	if err == nil {
		if ref, err = l.Commit(ctx, st, scope); err == nil {
			return ref, true, nil
		}
	}
	_ = l.Abort(st)
	return "", true, fmt.Errorf("import snapshot from %s: %w", srcDir, err)
}

// outsideScope returns whether a snapshot's path (relative,
// slash-separated) is left out of a snapshot of scope: with ScopeData
// everything but the volumes.
func outsideScope(scope Scope) func(rel string) bool {
	return func(rel string) bool {
		inVolumes := rel == VolumesDir || strings.HasPrefix(rel, VolumesDir+"/")
		return scope == ScopeData && !inVolumes
	}
}
