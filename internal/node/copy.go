package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// ErrNotRegular: the path names a directory or other non-regular file;
// `ate cp` copies single regular files. It wraps ErrBadPath.
var ErrNotRegular = fmt.Errorf("%w: not a regular file", ErrBadPath)

// mountPaths returns where spec's containers mount volume name.
func mountPaths(spec *atev1.ActorTemplateSpec, name string) []string {
	var out []string
	for _, c := range spec.GetContainers() {
		for _, vm := range c.GetVolumeMounts() {
			if vm.GetName() == name {
				out = append(out, vm.GetMountPath())
			}
		}
	}
	return out
}

// volumePath resolves p, an absolute path inside the actor's containers,
// to the volume that holds it: the volume's host directory and p relative
// to it. Errors wrap ErrBadPath.
func volumePath(vols []volume, p string) (hostDir, rel string, err error) {
	if !path.IsAbs(p) {
		return "", "", fmt.Errorf("%q: %w: it must be absolute", p, ErrBadPath)
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return "", "", fmt.Errorf("%q: %w: it must not contain \"..\"", p, ErrBadPath)
		}
	}
	clean := path.Clean(p)
	var mounts []string
	for _, v := range vols {
		for _, mp := range v.mountPaths {
			mp = path.Clean(mp)
			mounts = append(mounts, mp)
			if r, ok := strings.CutPrefix(clean, mp+"/"); ok && r != "" {
				return v.hostDir, filepath.FromSlash(r), nil
			}
		}
	}
	if len(mounts) == 0 {
		return "", "", fmt.Errorf("%q: %w: its template declares no volumes", p, ErrBadPath)
	}
	return "", "", fmt.Errorf("%q: %w (mounted at %s)", p, ErrBadPath, strings.Join(mounts, ", "))
}

// staysInside reports whether rel, resolved with its symlinks inside
// dir, stays inside dir; elements that do not exist yet are taken as
// plain names. It is the check that gives a clear ErrBadPath; os.Root,
// which does the I/O, enforces the same against races.
func staysInside(dir, rel string) error {
	cur := dir
	hops := 0
	rest := strings.Split(rel, string(filepath.Separator))
	for len(rest) > 0 {
		el := rest[0]
		rest = rest[1:]
		if el == "" || el == "." {
			continue
		}
		next := filepath.Join(cur, el)
		fi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return fmt.Errorf("%s: %w: too many symlinks", rel, ErrBadPath)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return err
		}
		if filepath.IsAbs(target) {
			return fmt.Errorf("%s: %w: symlink %s leads out of the volume", rel, ErrBadPath, el)
		}
		resolved := filepath.Join(cur, target)
		if resolved != dir && !strings.HasPrefix(resolved, dir+string(filepath.Separator)) {
			return fmt.Errorf("%s: %w: symlink %s leads out of the volume", rel, ErrBadPath, el)
		}
		r, _ := filepath.Rel(dir, resolved)
		cur = dir
		rest = append(strings.Split(r, string(filepath.Separator)), rest...)
	}
	return nil
}

// volumeFile finds the volume file p of the actor incarnation actorUID on
// worker: an open os.Root of the volume's host directory (the caller
// closes it) and p's path in it.
func (n *Node) volumeFile(worker, actorUID, p string) (*os.Root, string, error) {
	s, err := n.slot(worker)
	if err != nil {
		return nil, "", err
	}
	if !s.gate.hosts(actorUID) {
		return nil, "", fmt.Errorf("copy for %s on %s: %w", actorUID, worker, ErrStale)
	}
	s.mu.Lock()
	vols := s.volumes
	s.mu.Unlock()
	dir, rel, err := volumePath(vols, p)
	if err != nil {
		return nil, "", err
	}
	if err := staysInside(dir, rel); err != nil {
		return nil, "", fmt.Errorf("%q: %w", p, err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, "", err
	}
	return root, rel, nil
}

// CopyIn writes r, at most MaxCopyBytes, to the file p (an absolute path
// inside the actor's containers, under a volume's mount path) of the
// running actor incarnation actorUID on worker, creating missing parent
// directories, and returns the bytes written. The file appears whole or
// not at all: it is written beside p and renamed over it. The container
// sees it at once (the volume is a bind mount of that directory). Errors
// wrap ErrStale, ErrBadPath or ErrTooLarge.
func (n *Node) CopyIn(ctx context.Context, worker, actorUID, p string, mode fs.FileMode, r io.Reader) (int64, error) {
	root, rel, err := n.volumeFile(worker, actorUID, p)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	if dir := filepath.Dir(rel); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return 0, fmt.Errorf("%q: %w", p, err)
		}
	}
	if mode == 0 {
		mode = 0o644
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	tmp := filepath.Join(filepath.Dir(rel), ".ate-cp-"+hex.EncodeToString(b[:]))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode.Perm())
	if err != nil {
		return 0, fmt.Errorf("%q: %w", p, err)
	}
	written, err := io.Copy(f, io.LimitReader(&ctxReader{ctx: ctx, r: r}, MaxCopyBytes+1))
	if err == nil && written > MaxCopyBytes {
		err = fmt.Errorf("%q: %w", p, ErrTooLarge)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, rel)
	}
	if err != nil {
		_ = root.Remove(tmp)
		return 0, err
	}
	return written, nil
}

// CopyOut writes the file p (as for CopyIn) of the running actor
// incarnation actorUID on worker to w and returns its size. Errors wrap
// ErrStale, ErrBadPath, ErrNotRegular, ErrTooLarge or ErrNoFile.
func (n *Node) CopyOut(ctx context.Context, worker, actorUID, p string, w io.Writer) (int64, error) {
	root, rel, err := n.volumeFile(worker, actorUID, p)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	// O_NONBLOCK: the actor may have made p a FIFO, whose blocking open
	// would hold this goroutine until a writer came, which the actor
	// decides; the type is checked on the opened descriptor below.
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("%q: %w", p, ErrNoFile)
	}
	if err != nil {
		return 0, fmt.Errorf("%q: %w", p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("%q: %w", p, ErrNotRegular)
	}
	if fi.Size() > MaxCopyBytes {
		return 0, fmt.Errorf("%q: %w", p, ErrTooLarge)
	}
	return io.Copy(w, &ctxReader{ctx: ctx, r: io.LimitReader(f, MaxCopyBytes)})
}

// ctxReader ends a copy between reads once ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}
