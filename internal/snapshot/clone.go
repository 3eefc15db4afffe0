package snapshot

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
	if err := linkTree(st.Dir, dir); err != nil {
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
// links its regular files, leaving out src's manifest.
func linkTree(dst, src string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." || rel == ManifestName {
			return err
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
