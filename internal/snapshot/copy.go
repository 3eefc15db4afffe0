package snapshot

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrTreeChanged: an entry of a tree being copied kept changing its type
// (file, directory, symlink) between being looked at and being opened,
// as only a program racing the copy makes it do.
var ErrTreeChanged = errors.New("entry changed type while being copied")

// changeRetries is how often CopyTree looks again at an entry that changed
// type under it before giving up with ErrTreeChanged: a program that
// replaces its files by rename is seen whole on the first look; only one
// that keeps swapping an entry on purpose exhausts three.
const changeRetries = 3

// CopyTree copies the regular files, directories and symlinks under src
// into dst (created if missing), skipping paths (relative, slash-separated)
// for which skip returns true. Files keep their permission bits. It is how
// volumes move in and out of snapshots.
//
// It never follows a symlink below src or dst. src may be a volume that a
// running sandbox is changing (a live checkpoint copies it while the actor
// runs, livecheckpoint.go), and the node copies as root: a file or
// directory the actor swaps for a symlink between the listing and the
// open must not lead the copy to a host file, which the copy would hand to
// the actor. So every entry is opened relative to its parent directory's
// descriptor with O_NOFOLLOW, and copied as what the opened descriptor is
// (fstat), never as what the listing said: a symlink is copied as a
// symlink, and an entry that keeps changing type fails the copy with
// ErrTreeChanged. An entry that disappears while being copied is left
// out, as if deleted just before. src and dst themselves are the caller's
// paths and are resolved as given.
func CopyTree(dst, src string, skip func(rel string) bool) error {
	return copyTree(dst, src, src, skip, nil, nil)
}

// ErrTooLarge: a tree holds more bytes or entries than the copy's Limits
// allow.
var ErrTooLarge = errors.New("tree exceeds its size limit")

// Limits bound what one copy writes; zero fields do not bound.
type Limits struct {
	// Bytes bounds the sum of the regular files' sizes, as they read
	// (a sparse file counts its holes: they would be written out).
	Bytes int64
	// Entries bounds the files, directories and symlinks.
	Entries int64
}

// Validate refuses negative limits.
func (l Limits) Validate() error {
	if l.Bytes < 0 || l.Entries < 0 {
		return fmt.Errorf("limits of %d bytes and %d entries: want 0 (no limit) or more", l.Bytes, l.Entries)
	}
	return nil
}

// Shape bounds of CopyTreeWithin, whatever its Limits: the copy holds two
// descriptors per directory level (a tree 12,000 levels deep exhausted
// a node's open files), and a path longer than the kernel's PATH_MAX
// (4096, with the snapshot's own directories in front) copies by
// descriptors but can never be opened by path again at restore.
const (
	MaxTreeDepth     = 256
	MaxTreePathBytes = 2048
)

// CopyTreeWithin is CopyTree of a whole tree bounded by lim: a tree
// whose entries or bytes exceed them stops the copy with ErrTooLarge, a
// file larger than what is left of the budget before a byte of it is
// written; so does a tree deeper than MaxTreeDepth or with a path longer
// than MaxTreePathBytes. It is how a node copies a volume out of a
// sandbox: the actor decides what the volume holds (a 16 TiB sparse file
// costs it one ftruncate), the node's disk and the snapshot store pay
// for it. Errors name the tree by its last element (the volume's name),
// not by the host path, since they reach the actor's owner.
func CopyTreeWithin(dst, src string, lim Limits) error {
	return copyTree(dst, src, filepath.Base(src), nil, &lim, nil)
}

// copyTree is CopyTree, or CopyTreeWithin when lim is set; errors name
// the tree as name. beforeOpen, if not nil, runs between the look at
// each entry and its open (tests race the copy there).
func copyTree(dst, src, name string, skip func(rel string) bool, lim *Limits, beforeOpen func(rel string)) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return fmt.Errorf("copy %s: not a directory", name)
	}
	if err := os.MkdirAll(dst, info.Mode().Perm()|0o700); err != nil {
		return err
	}
	out, err := os.Open(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	c := treeCopier{skip: skip, beforeOpen: beforeOpen, lim: lim}
	if err := c.dir(out, in, ""); err != nil {
		return fmt.Errorf("copy %s: %w", name, err)
	}
	return nil
}

// treeCopier walks one tree by descriptors. Not safe for concurrent use.
type treeCopier struct {
	skip       func(rel string) bool
	beforeOpen func(rel string)
	// lim, if set, bounds the copy (CopyTreeWithin); bytes and entries
	// are what it wrote so far.
	lim            *Limits
	bytes, entries int64
}

// count charges one entry at rel of size bytes (0 for all but regular
// files) against the limits, before it is copied.
func (c *treeCopier) count(rel string, size int64) error {
	if c.lim == nil {
		return nil
	}
	if len(rel) > MaxTreePathBytes {
		return fmt.Errorf("%w: a path longer than %d bytes", ErrTooLarge, MaxTreePathBytes)
	}
	if strings.Count(rel, "/") >= MaxTreeDepth {
		return fmt.Errorf("%w: directories nested deeper than %d levels", ErrTooLarge, MaxTreeDepth)
	}
	c.entries++
	if c.lim.Entries > 0 && c.entries > c.lim.Entries {
		return fmt.Errorf("%w: more than %d files, directories and symlinks", ErrTooLarge, c.lim.Entries)
	}
	if c.lim.Bytes > 0 && c.bytes+size > c.lim.Bytes {
		return fmt.Errorf("%w: more than %d bytes", ErrTooLarge, c.lim.Bytes)
	}
	return nil
}

// fileBudget is how many bytes one more file may hold (-1: unbounded).
func (c *treeCopier) fileBudget() int64 {
	if c.lim == nil || c.lim.Bytes <= 0 {
		return -1
	}
	return c.lim.Bytes - c.bytes
}

// dir copies the entries of the open directory in (at rel, "" for the
// root) into the open directory out.
func (c *treeCopier) dir(out, in *os.File, rel string) error {
	names, err := in.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("%s: %w", displayRel(rel), err)
	}
	slices.Sort(names) // the order filepath.WalkDir copied in
	for _, name := range names {
		r := path.Join(rel, name)
		if c.skip != nil && c.skip(r) {
			continue
		}
		err := c.entry(out, in, name, r)
		for try := 1; errors.Is(err, errLooked) && try < changeRetries; try++ {
			err = c.entry(out, in, name, r)
		}
		var sub *subtreeError
		switch {
		case errors.As(err, &sub):
			return sub.err // names the entry below that failed
		case errors.Is(err, errLooked):
			return fmt.Errorf("%s: %w", r, ErrTreeChanged)
		case errors.Is(err, errGone):
			continue // deleted while the copy ran
		case err != nil:
			return fmt.Errorf("%s: %w", r, err)
		}
	}
	return nil
}

// errLooked: the entry was not, once opened, what it was when looked at;
// entry is run again.
var errLooked = errors.New("entry changed since it was looked at")

// subtreeError is an error from below a directory entry, which names the
// entry it concerns already.
type subtreeError struct{ err error }

func (e *subtreeError) Error() string { return e.err.Error() }
func (e *subtreeError) Unwrap() error { return e.err }

// errGone: the source entry no longer exists.
var errGone = errors.New("entry deleted while being copied")

// gone maps ENOENT on the source side to errGone, so that a missing
// destination directory is not mistaken for a deleted source entry.
func gone(err error) error {
	if errors.Is(err, unix.ENOENT) {
		return errGone
	}
	return err
}

// entry copies name, an entry of directory in, into directory out.
func (c *treeCopier) entry(out, in *os.File, name, rel string) error {
	ifd, ofd := int(in.Fd()), int(out.Fd())
	var st unix.Stat_t
	if err := unix.Fstatat(ifd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return gone(err)
	}
	if c.beforeOpen != nil {
		c.beforeOpen(rel)
	}
	var size int64
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		size = st.Size
	}
	if err := c.count(rel, size); err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		target, err := readlinkat(ifd, name)
		if errors.Is(err, unix.EINVAL) {
			return errLooked // no longer a symlink
		}
		if err != nil {
			return gone(err)
		}
		return unix.Symlinkat(target, ofd, name)
	case unix.S_IFDIR:
		sub, perm, err := openAt(ifd, name, unix.O_DIRECTORY, unix.S_IFDIR)
		if err != nil {
			return gone(err)
		}
		defer sub.Close()
		if err := unix.Mkdirat(ofd, name, perm|0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
		dsub, _, err := openAt(ofd, name, unix.O_DIRECTORY, unix.S_IFDIR)
		if errors.Is(err, errLooked) {
			return fmt.Errorf("destination %s is not a directory", rel) // dst is ours: no retry
		}
		if err != nil {
			return err
		}
		defer dsub.Close()
		if err := c.dir(dsub, sub, rel); err != nil {
			return &subtreeError{err}
		}
		return nil
	case unix.S_IFREG:
		f, perm, err := openAt(ifd, name, unix.O_NONBLOCK|unix.O_NOCTTY, unix.S_IFREG)
		if err != nil {
			return gone(err)
		}
		defer f.Close()
		n, err := copyFileAt(ofd, name, f, perm, c.fileBudget())
		c.bytes += n
		return err
	default:
		return nil // devices, sockets, fifos are not data
	}
}

// openAt opens name in directory dirfd for reading without following a
// symlink, checks that what it opened has file type typ (S_IFDIR or
// S_IFREG), and returns it with its permission bits; an entry that became
// a symlink or another type since it was looked at returns errLooked.
// O_NONBLOCK (for files) keeps a FIFO swapped in from blocking the open;
// it is closed unread.
func openAt(dirfd int, name string, flags int, typ uint32) (*os.File, uint32, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|flags, 0)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ENXIO) {
		return nil, 0, errLooked // a symlink (or, for ENXIO, a socket) now
	}
	if err != nil {
		return nil, 0, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, 0, err
	}
	if st.Mode&unix.S_IFMT != typ {
		unix.Close(fd)
		return nil, 0, errLooked
	}
	return os.NewFile(uintptr(fd), name), st.Mode & 0o777, nil
}

// copyFileAt writes the contents of in to name in directory dirfd,
// created with permission bits perm or truncated, never through a
// symlink (nor blocking on a FIFO found there), and returns the bytes
// written. budget >= 0 bounds them (the file may grow while it is
// copied): a file longer fails with ErrTooLarge.
func copyFileAt(dirfd int, name string, in *os.File, perm uint32, budget int64) (int64, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, perm)
	if err != nil {
		return 0, err
	}
	out := os.NewFile(uintptr(fd), name)
	var r io.Reader = in
	if budget >= 0 {
		r = io.LimitReader(in, budget+1)
	}
	n, err := io.Copy(out, r)
	if err == nil && budget >= 0 && n > budget {
		err = fmt.Errorf("%w: the files grow past the byte limit while being copied", ErrTooLarge)
	}
	if err != nil {
		out.Close()
		return n, err
	}
	return n, out.Close()
}

// readlinkat returns the target of symlink name in directory dirfd.
func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

func displayRel(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

// EmptyDir makes dir an empty directory (creating it if missing) without
// replacing the directory itself, so that a bind mount of it, which
// follows the inode, sees the emptied directory. It does not follow
// symlinks below dir (os.RemoveAll removes a symlink, not its target, and
// opens each subdirectory relative to its parent with O_NOFOLLOW), so a
// sandbox that still writes dir cannot turn it against a host directory.
func EmptyDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
