package image

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// packEntry is one file of the image being packed.
type packEntry struct {
	name string      // tar name relative to the root, no trailing slash
	src  string      // host path; "" for a directory Pack made up
	fi   fs.FileInfo // lstat of src; nil when src is ""
	link string      // symlink target
}

func (e *packEntry) isDir() bool { return e.fi == nil || e.fi.IsDir() }

// collect lists the files of all sources, later sources overriding earlier
// ones, sorted by name (so every directory precedes its contents).
func collect(ctx context.Context, o PackOptions) ([]*packEntry, error) {
	tree := map[string]*packEntry{}
	skipped := 0
	for _, s := range o.Sources {
		n, err := addSource(ctx, tree, s, o.Logger)
		if err != nil {
			return nil, err
		}
		skipped += n
	}
	if skipped > 0 {
		o.Logger.Info("pack skipped special files (device nodes, FIFOs, sockets)", "count", skipped)
	}
	out := make([]*packEntry, 0, len(tree))
	for _, e := range tree {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *packEntry) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// addSource adds one source to tree and returns how many special files it
// skipped.
func addSource(ctx context.Context, tree map[string]*packEntry, s PackSource, logger *slog.Logger) (int, error) {
	src, err := filepath.EvalSymlinks(s.Src)
	if err != nil {
		return 0, fmt.Errorf("pack: source %s: %w", s.Src, err)
	}
	fi, err := os.Stat(src)
	if err != nil {
		return 0, fmt.Errorf("pack: source %s: %w", s.Src, err)
	}
	dest := destName(s.Dest)
	if !fi.IsDir() {
		if dest == "" {
			return 0, fmt.Errorf("pack: source %s is a file: give its path in the image, e.g. %s:/%s", s.Src, s.Src, filepath.Base(src))
		}
		if !fi.Mode().IsRegular() {
			return 0, fmt.Errorf("pack: source %s is not a regular file or directory", s.Src)
		}
		addParents(tree, dest)
		put(tree, &packEntry{name: dest, src: src, fi: fi})
		return 0, nil
	}
	addParents(tree, dest)
	if dest != "" {
		put(tree, &packEntry{name: dest, src: src, fi: fi})
	}
	skipped := 0
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == src {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		e := &packEntry{name: path.Join(dest, filepath.ToSlash(rel)), src: p, fi: info}
		switch t := info.Mode().Type(); t {
		case 0, fs.ModeDir:
		case fs.ModeSymlink:
			if e.link, err = os.Readlink(p); err != nil {
				return err
			}
		default:
			skipped++
			logger.Debug("pack skipping special file", "path", p, "type", t.String())
			return nil
		}
		put(tree, e)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("pack: source %s: %w", s.Src, err)
	}
	return skipped, nil
}

// put adds e to tree. A non-directory replacing a directory also drops
// what was under it, so the tar never holds "x" as a file and "x/y".
func put(tree map[string]*packEntry, e *packEntry) {
	if old, ok := tree[e.name]; ok && old.isDir() && !e.isDir() {
		prefix := e.name + "/"
		for n := range tree {
			if strings.HasPrefix(n, prefix) {
				delete(tree, n)
			}
		}
	}
	tree[e.name] = e
}

// addParents makes sure every ancestor of name is a directory in tree,
// adding made-up ones (mode 0755) where no source gave one.
func addParents(tree map[string]*packEntry, name string) {
	for i := 0; i < len(name); i++ {
		if name[i] != '/' {
			continue
		}
		if e, ok := tree[name[:i]]; !ok || !e.isDir() {
			put(tree, &packEntry{name: name[:i]})
		}
	}
}

// fileLayer is a layer blob already written to disk by writeLayer.
type fileLayer struct {
	path      string
	digest    v1.Hash // of the blob as stored
	diffID    v1.Hash // of the uncompressed tar
	size      int64   // of the blob as stored
	mediaType types.MediaType
}

var _ v1.Layer = (*fileLayer)(nil)

func (l *fileLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *fileLayer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *fileLayer) Size() (int64, error)                { return l.size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error) { return l.mediaType, nil }
func (l *fileLayer) Compressed() (io.ReadCloser, error)  { return os.Open(l.path) }

func (l *fileLayer) Uncompressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil || l.mediaType == types.OCIUncompressedLayer {
		return f, err
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{zr, f}, nil
}

// writeLayer writes the tar of entries into dir (blobs/sha256 of the
// layout being built) under its digest, hashing as it goes so the data is
// read and written once.
func writeLayer(ctx context.Context, entries []*packEntry, dir string, c Compression, keepMTimes bool) (_ *fileLayer, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("pack: %w", err)
	}
	f, err := os.CreateTemp(dir, ".layer-")
	if err != nil {
		return nil, fmt.Errorf("pack: %w", err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	blobHash, tarHash := sha256.New(), sha256.New()
	var size countWriter
	bw := bufio.NewWriterSize(io.MultiWriter(f, blobHash, &size), 1<<20)
	l := &fileLayer{mediaType: types.OCIUncompressedLayer}
	var tarOut io.Writer = bw
	var zw *gzip.Writer
	if c == CompressionGzip {
		l.mediaType = types.OCILayer
		zw = gzip.NewWriter(bw) // no name, zero mtime: deterministic
		tarOut = io.MultiWriter(zw, tarHash)
	}
	if err := writeTar(ctx, tarOut, entries, keepMTimes); err != nil {
		return nil, err
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return nil, fmt.Errorf("pack: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("pack: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("pack: %w", err)
	}
	l.size = int64(size)
	l.digest = sum(blobHash)
	l.diffID = l.digest
	if zw != nil {
		l.diffID = sum(tarHash)
	}
	l.path = filepath.Join(dir, l.digest.Hex)
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return nil, fmt.Errorf("pack: %w", err)
	}
	if err := os.Rename(f.Name(), l.path); err != nil {
		return nil, fmt.Errorf("pack: %w", err)
	}
	return l, nil
}

// fileID identifies an inode, to find hard links.
type fileID struct{ dev, ino uint64 }

// writeTar writes entries as a deterministic tar stream.
func writeTar(ctx context.Context, w io.Writer, entries []*packEntry, keepMTimes bool) error {
	tw := tar.NewWriter(w)
	seen := map[fileID]string{} // first name of each multiply-linked inode
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		h := tarHeader(e, seen, keepMTimes)
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("pack: %s: %w", e.src, err)
		}
		if h.Typeflag != tar.TypeReg || h.Size == 0 {
			continue
		}
		if err := copyFile(tw, e.src, h.Size); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("pack: %w", err)
	}
	return nil
}

// tarHeader builds e's header. Only the fields below are set: no owner
// names, atime or ctime, which would make the output depend on the host.
// The time is packEpoch unless keepMTimes (made-up directories always get
// packEpoch). seen maps inodes already written to their first name.
func tarHeader(e *packEntry, seen map[fileID]string, keepMTimes bool) *tar.Header {
	h := &tar.Header{Name: e.name, ModTime: packEpoch, Mode: 0o755, Typeflag: tar.TypeDir}
	if e.fi == nil {
		h.Name += "/"
		return h
	}
	if keepMTimes {
		h.ModTime = e.fi.ModTime().Truncate(time.Second).UTC()
	}
	m := e.fi.Mode()
	h.Mode = int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		h.Mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		h.Mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		h.Mode |= 0o1000
	}
	switch {
	case m.IsDir():
		h.Name += "/"
	case m&fs.ModeSymlink != 0:
		h.Typeflag, h.Linkname = tar.TypeSymlink, e.link
	default:
		h.Typeflag, h.Size = tar.TypeReg, e.fi.Size()
		if st, ok := e.fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
			id := fileID{uint64(st.Dev), st.Ino}
			if first, ok := seen[id]; ok {
				h.Typeflag, h.Size, h.Linkname = tar.TypeLink, 0, first
			} else {
				seen[id] = e.name
			}
		}
	}
	return h
}

// copyFile copies exactly size bytes of the file at p into w.
func copyFile(w io.Writer, p string, size int64) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("pack: %w", err)
	}
	defer f.Close()
	if _, err := io.CopyN(w, f, size); err != nil {
		return fmt.Errorf("pack: %s (changed while packing?): %w", p, err)
	}
	return nil
}

func sum(h hash.Hash) v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
}

// countWriter counts bytes written through it.
type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) {
	*c += countWriter(len(p))
	return len(p), nil
}
