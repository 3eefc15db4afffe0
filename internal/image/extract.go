package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"slices"
	"strings"
	"time"
)

// extractStats counts what extractTar did, for logs.
type extractStats struct {
	files   int64 // entries written (files, dirs, links)
	bytes   int64 // regular-file bytes written
	skipped int64 // entries not written (device nodes, FIFOs, shadowed)
}

// copyBufSize is the chunk in which file contents are copied: large enough
// that a several-hundred-MB rootfs costs few syscalls, small enough to be
// irrelevant next to the files themselves.
const copyBufSize = 256 << 10

// extractTar writes the tar stream r into the existing directory dir and
// returns what it wrote.
//
// The stream is what mutate.Extract produces: the flattened image with the
// top layer's entries first, each path at most once. So, unlike a plain tar:
//   - a directory's entry may come after entries inside it (those were
//     created with mode 0755, and the late entry only sets metadata);
//   - a hard link may name a file that comes later, so links whose target
//     does not exist yet are made at the end;
//   - a non-directory entry whose path already exists as a directory is
//     skipped: the directory came from an upper layer, which wins.
//
// Everything is written through an os.Root, so nothing can land outside
// dir; on top of that, names with "..", link targets outside dir and
// entries below a symlinked directory are refused with ErrUnsafePath
// (mutate.Extract already refuses ".." names itself, with its own error).
// Device nodes and FIFOs are skipped: the sandbox mounts its own /dev.
// Owners are kept only when running as root. Directory modes and times are
// applied last, deepest first, so read-only directories can be filled.
func extractTar(ctx context.Context, r io.Reader, dir string, logger *slog.Logger) (extractStats, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return extractStats{}, fmt.Errorf("open rootfs: %w", err)
	}
	defer root.Close()
	x := &extractor{
		root:   root,
		logger: logger,
		chown:  os.Geteuid() == 0,
		known:  map[string]bool{".": true},
		dirs:   map[string]*tar.Header{},
		buf:    make([]byte, copyBufSize),
	}
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return x.st, err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return x.st, fmt.Errorf("read layers: %w", err)
		}
		if err := x.entry(h, tr); err != nil {
			return x.st, err
		}
	}
	// mutate.Extract ends its tar cleanly even when it fails (it writes the
	// end-of-archive blocks before closing the pipe with the error), so a
	// failed download or a refused entry looks like a short, valid tar.
	// The error only shows when the stream is read past the tar's end.
	if _, err := io.Copy(io.Discard, r); err != nil {
		return x.st, fmt.Errorf("read layers: %w", err)
	}
	return x.st, x.finish()
}

// extractor holds the state of one extractTar call. Not safe for
// concurrent use.
type extractor struct {
	root   *os.Root
	logger *slog.Logger
	chown  bool
	// known holds directories verified (or created) as real directories,
	// so each parent is checked once rather than once per entry.
	known map[string]bool
	// dirs holds directory headers whose metadata is applied by finish.
	dirs map[string]*tar.Header
	// links holds hard links whose target had not been written yet.
	links []*tar.Header
	buf   []byte
	st    extractStats
}

// cleanName turns a tar member name into a path relative to the root:
// "./a/b/", "/a/b" and "a//b" all become "a/b"; the root itself is ".".
func cleanName(n string) (string, error) {
	c := path.Clean(n)
	// A rooted name cannot climb above "/" once cleaned ("/../x" is "/x"),
	// but a relative one can: "../x" and "a/../../x" are attacks.
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%w: %q escapes the root", ErrUnsafePath, n)
	}
	if c = strings.TrimLeft(c, "/"); c == "" {
		return ".", nil
	}
	return c, nil
}

func (x *extractor) entry(h *tar.Header, r io.Reader) error {
	name, err := cleanName(h.Name)
	if err != nil {
		return err
	}
	switch h.Typeflag {
	case tar.TypeDir, tar.TypeReg, tar.TypeSymlink, tar.TypeLink:
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo, tar.TypeXGlobalHeader:
		x.st.skipped++
		x.logger.Debug("skipping layer entry", "name", name, "type", string(h.Typeflag))
		return nil
	default:
		x.st.skipped++
		x.logger.Warn("skipping layer entry of unknown type", "name", name, "type", string(h.Typeflag))
		return nil
	}
	if name == "." {
		if h.Typeflag == tar.TypeDir {
			x.dirs["."] = h
		}
		return nil
	}
	if err := x.parents(name); err != nil {
		return err
	}
	fi, err := x.root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("extract %s: %w", name, err)
	case fi.IsDir() && h.Typeflag == tar.TypeDir:
		x.dirs[name] = h
		return nil
	case fi.IsDir():
		x.st.skipped++
		x.logger.Debug("layer entry shadowed by a directory", "name", name)
		return nil
	default:
		// The same path twice in one stream: the later entry wins, as
		// with tar.
		if err := x.root.Remove(name); err != nil {
			return fmt.Errorf("extract %s: %w", name, err)
		}
	}

	x.st.files++
	switch h.Typeflag {
	case tar.TypeDir:
		if err := x.root.Mkdir(name, 0o700); err != nil {
			return fmt.Errorf("extract %s: %w", name, err)
		}
		x.known[name] = true
		x.dirs[name] = h
		return nil
	case tar.TypeReg:
		return x.file(name, h, r)
	case tar.TypeSymlink:
		if err := x.root.Symlink(h.Linkname, name); err != nil {
			return fmt.Errorf("extract %s: %w", name, err)
		}
		return x.owner(name, h)
	default: // tar.TypeLink
		target, err := cleanName(h.Linkname)
		if err != nil || target == "." {
			return fmt.Errorf("%w: hard link %s -> %q", ErrUnsafePath, name, h.Linkname)
		}
		if _, err := x.root.Lstat(target); errors.Is(err, fs.ErrNotExist) {
			x.links = append(x.links, h)
			return nil
		}
		return x.link(name, target)
	}
}

// parents makes sure every ancestor of name is a real directory, creating
// missing ones (mode 0755, like tar), and refuses symlinked ancestors: the
// layer would otherwise write somewhere its names do not say.
func (x *extractor) parents(name string) error {
	for i := 0; i < len(name); i++ {
		if name[i] != '/' {
			continue
		}
		p := name[:i]
		if x.known[p] {
			continue
		}
		fi, err := x.root.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := x.root.Mkdir(p, 0o755); err != nil {
				return fmt.Errorf("extract %s: %w", name, err)
			}
		case err != nil:
			return fmt.Errorf("extract %s: %w", name, err)
		case fi.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("%w: %s: parent %s is a symlink", ErrUnsafePath, name, p)
		case !fi.IsDir():
			return fmt.Errorf("extract %s: parent %s is not a directory", name, p)
		}
		x.known[p] = true
	}
	return nil
}

func (x *extractor) file(name string, h *tar.Header, r io.Reader) error {
	f, err := x.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("extract %s: %w", name, err)
	}
	// Hide (*os.File).ReadFrom so CopyBuffer uses our buffer instead of
	// io.Copy's 32 KB one.
	n, err := io.CopyBuffer(struct{ io.Writer }{f}, r, x.buf)
	x.st.bytes += n
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("extract %s: %w", name, err)
	}
	return x.meta(name, h)
}

func (x *extractor) link(name, target string) error {
	if err := x.root.Link(target, name); err != nil {
		return fmt.Errorf("extract hard link %s: %w", name, err)
	}
	return nil
}

// owner sets name's owner (not following symlinks) when we may.
func (x *extractor) owner(name string, h *tar.Header) error {
	if !x.chown {
		return nil
	}
	if err := x.root.Lchown(name, h.Uid, h.Gid); err != nil {
		return fmt.Errorf("extract %s: %w", name, err)
	}
	return nil
}

// meta applies owner, mode and times to a file or directory. The owner goes
// first because chown clears setuid and setgid bits.
func (x *extractor) meta(name string, h *tar.Header) error {
	if err := x.owner(name, h); err != nil {
		return err
	}
	if err := x.root.Chmod(name, modeOf(h)); err != nil {
		return fmt.Errorf("extract %s: %w", name, err)
	}
	if err := x.root.Chtimes(name, h.ModTime, h.ModTime); err != nil {
		return fmt.Errorf("extract %s: %w", name, err)
	}
	return nil
}

// finish makes the deferred hard links, then applies directory metadata
// children first (reverse lexical order puts "a/b" before "a").
func (x *extractor) finish() error {
	for _, h := range x.links {
		name, _ := cleanName(h.Name)
		target, _ := cleanName(h.Linkname)
		if _, err := x.root.Lstat(target); err != nil {
			return fmt.Errorf("extract hard link %s: target %s: %w", name, target, err)
		}
		if err := x.link(name, target); err != nil {
			return err
		}
	}
	if _, ok := x.dirs["."]; !ok {
		// No root entry (the usual case): the rootfs root must still be
		// searchable by the sandbox's non-root users.
		x.dirs["."] = &tar.Header{Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Unix(0, 0)}
	}
	names := make([]string, 0, len(x.dirs))
	for n := range x.dirs {
		names = append(names, n)
	}
	slices.Sort(names)
	slices.Reverse(names)
	for _, n := range names {
		if err := x.meta(n, x.dirs[n]); err != nil {
			return err
		}
	}
	return nil
}

// modeOf returns the permission and setuid/setgid/sticky bits of h.
func modeOf(h *tar.Header) fs.FileMode {
	m := h.FileInfo().Mode()
	return m.Perm() | m&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)
}
