package image

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// Option configures a Cache.
type Option func(*Cache)

// LocalRoots confines oci: and oci-archive: references to paths under
// roots, absolute directories the operator trusts (ate's --image-root).
// Whoever writes a template names the path, and the API server and the
// nodes open it as root: without a bound, an editor could probe for any
// file on those machines, or make them read one. A path is checked
// lexically, after making it absolute and cleaning "..", before anything
// is opened, so a path outside every root gets the same ErrPathNotAllowed
// whether or not it exists. Inside a root, files are opened through
// os.Root: a symlink may not lead out of the root (the roots' own paths
// may contain symlinks; the operator chose them). An empty roots allows
// no local image at all. Without this option any path is allowed, for
// tests and tools; the commands always set it.
func LocalRoots(roots []string) Option {
	return func(c *Cache) {
		c.roots = localRoots{restricted: true}
		for _, r := range roots {
			if r != "" {
				c.roots.dirs = append(c.roots.dirs, filepath.Clean(r))
			}
		}
	}
}

// AbsRoots returns roots made absolute against the working directory, the
// form LocalRoots wants, with empty entries left out.
func AbsRoots(roots []string) ([]string, error) {
	out := make([]string, 0, len(roots))
	for _, r := range roots {
		if r == "" {
			continue
		}
		abs, err := filepath.Abs(r)
		if err != nil {
			return nil, fmt.Errorf("image root %q: %w", r, err)
		}
		out = append(out, abs)
	}
	return out, nil
}

// localRoots is where local images may be read from.
type localRoots struct {
	// restricted is false when any path is allowed (no LocalRoots).
	restricted bool
	// dirs are the allowed roots, cleaned absolute paths.
	dirs []string
}

// locate returns the root p lies under and p relative to it, or an error
// wrapping ErrPathNotAllowed. It looks at nothing on disk.
func (l localRoots) locate(p string) (root, rel string, err error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", "", fmt.Errorf("image path %s: %w", p, err)
	}
	if !l.restricted {
		return "/", relTo("/", abs), nil
	}
	for _, d := range l.dirs {
		if abs == d || strings.HasPrefix(abs, strings.TrimSuffix(d, "/")+"/") {
			return d, relTo(d, abs), nil
		}
	}
	allowed := "none"
	if len(l.dirs) > 0 {
		allowed = strings.Join(l.dirs, ", ")
	}
	return "", "", fmt.Errorf("%w: %s is not under an image root of this installation (allowed: %s); "+
		"use a registry reference, or ask the operator to add a root (--image-root)", ErrPathNotAllowed, p, allowed)
}

// relTo is abs (clean, under root) relative to root.
func relTo(root, abs string) string {
	rel, err := filepath.Rel(root, abs)
	if err != nil {
		return "."
	}
	return rel
}

// openRoot opens the root a local reference lies under and returns it with
// the reference's path relative to it.
func (l localRoots) openRoot(r Ref) (*os.Root, string, error) {
	dir, rel, err := l.locate(r.Path)
	if err != nil {
		return nil, "", err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, "", fmt.Errorf("open image root %s: %w", dir, err)
	}
	return root, rel, nil
}

// openRegular opens name in root for reading and refuses anything but a
// regular file. O_NONBLOCK keeps the open of a FIFO (which would wait for
// a writer, forever) from blocking, so that the mode check can refuse it;
// reads of regular files ignore the flag.
func openRegular(root *os.Root, name string) (*os.File, int64, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		_ = f.Close()
		return nil, 0, fmt.Errorf("%s: %w", name, errNotRegular)
	}
	return f, fi.Size(), nil
}

// errNotRegular marks a layout file or archive that is a directory, FIFO,
// device or socket.
var errNotRegular = errors.New("not a regular file")

// dirLayout is an OCI image layout directory read through an os.Root, so
// that no symlink in it leads out of its image root.
type dirLayout struct {
	root *os.Root
	dir  string // the layout, relative to root
	name string // the layout as the reference wrote it
}

var _ layoutSource = (*dirLayout)(nil)

func (d *dirLayout) open(name string) (io.ReadCloser, int64, error) {
	f, size, err := openRegular(d.root, path.Join(d.dir, name))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNotRegular) || errors.Is(err, syscall.ENOTDIR) {
			return nil, 0, fmt.Errorf("%w: %s has no %s (%w)", ErrNotFound, d, name, err)
		}
		return nil, 0, fmt.Errorf("open %s in %s: %w", name, d, err)
	}
	return f, size, nil
}

func (d *dirLayout) String() string { return "oci layout " + d.name }

// Close closes the root the layout is read through.
func (d *dirLayout) Close() error { return d.root.Close() }
