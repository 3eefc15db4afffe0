package image

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// fileState is what a tree comparison checks about one path.
type fileState struct {
	mode    fs.FileMode // type, permission and setuid/setgid/sticky bits
	content string      // sha256 of a regular file
	link    string      // symlink target
	group   string      // first path (sorted) sharing this inode, for hard links
	mtime   time.Time
}

// snapshot lists every path under root (relative, the root itself left
// out) with its state.
func snapshot(t *testing.T, root string) map[string]fileState {
	t.Helper()
	out := map[string]fileState{}
	inodes := map[uint64]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		st := fileState{mode: fi.Mode(), mtime: fi.ModTime()}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			st.link, err = os.Readlink(p)
		case fi.Mode().IsRegular():
			var b []byte
			b, err = os.ReadFile(p)
			sum := sha256.Sum256(b)
			st.content = hex.EncodeToString(sum[:])
			ino := fi.Sys().(*syscall.Stat_t).Ino
			if first, ok := inodes[ino]; ok {
				st.group = first
			} else {
				inodes[ino] = rel
				st.group = rel
			}
		}
		out[rel] = st
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// compareTrees reports differences in type, mode, content, link target and
// hard-link grouping (not times: Pack rewrites them).
func compareTrees(t *testing.T, want, got map[string]fileState) {
	t.Helper()
	for p, w := range want {
		g, ok := got[p]
		if !ok {
			t.Errorf("%s: missing", p)
			continue
		}
		if g.mode != w.mode || g.content != w.content || g.link != w.link || g.group != w.group {
			t.Errorf("%s: got mode %v content %.8s link %q group %q, want %v %.8s %q %q",
				p, g.mode, g.content, g.link, g.group, w.mode, w.content, w.link, w.group)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s: unexpected", p)
		}
	}
}

// writeFiles creates a test tree under dir: nested directories, a read-only
// directory with contents, odd modes, relative and absolute symlinks, a
// dangling symlink and a hard link.
func writeFiles(t *testing.T, dir string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	file := func(name, content string, mode fs.FileMode) {
		p := filepath.Join(dir, name)
		must(os.MkdirAll(filepath.Dir(p), 0o755))
		must(os.WriteFile(p, []byte(content), 0o600))
		must(os.Chmod(p, mode))
	}
	file("bin/tool", "#!/bin/sh\necho hi\n", 0o755)
	file("bin/suid", "x", 0o4755|fs.ModeSetuid)
	file("etc/config", "a=1\n", 0o640)
	file("etc/empty", "", 0o644)
	file("a/b/c/deep.txt", "deep", 0o600)
	file("ro/inside", "kept", 0o444)
	must(os.Chmod(filepath.Join(dir, "ro"), 0o555))
	// Without root, t.TempDir's removal cannot empty a 0555 directory:
	// before it, every directory under the test's temporary root is
	// made writable again. Callers put dir in one t.TempDir(); the root
	// above it also holds the other t.TempDir()s, where the caches the
	// tests unpack these files into live.
	root := filepath.Dir(filepath.Dir(dir))
	t.Cleanup(func() {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = os.Chmod(p, 0o700)
			}
			return nil
		})
	})
	must(os.Mkdir(filepath.Join(dir, "tmp"), 0o755))
	must(os.Chmod(filepath.Join(dir, "tmp"), 0o777|fs.ModeSticky))
	must(os.Symlink("tool", filepath.Join(dir, "bin/rel-link")))
	must(os.Symlink("/etc/config", filepath.Join(dir, "abs-link")))
	must(os.Symlink("nowhere", filepath.Join(dir, "dangling")))
	must(os.Link(filepath.Join(dir, "bin/tool"), filepath.Join(dir, "bin/tool-hardlink")))
}

// tarEntry is one member of a hand-made layer.
type tarEntry struct {
	name, body, link string
	typ              byte
	mode             int64
}

// tarBytes builds an uncompressed tar from entries, in order.
func tarBytes(t *testing.T, entries []tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Size: int64(len(e.body))}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// writeLayout writes img as an OCI layout at dir with the given tags
// (one manifest per tag; "" writes one untagged manifest).
func writeLayout(t *testing.T, dir string, img v1.Image, tags ...string) {
	t.Helper()
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range tags {
		var opts []layout.Option
		if tag != "" {
			opts = append(opts, layout.WithAnnotations(map[string]string{annotationRefName: tag}))
		}
		if err := lp.AppendImage(img, opts...); err != nil {
			t.Fatal(err)
		}
	}
}

// tarDir writes a tar of dir's contents (names relative to dir) to out, as
// `tar -C dir -cf out .` would.
func tarDir(t *testing.T, dir, out string) {
	t.Helper()
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h.Name = "./" + filepath.ToSlash(rel)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

// onlyImage opens the only image in the OCI layout at dir and returns it
// with its index entry.
func onlyImage(t *testing.T, dir string) (v1.Image, v1.Descriptor) {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("%s: %d manifests, want 1", dir, len(im.Manifests))
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img, im.Manifests[0]
}

// layoutDigest returns the manifest digest of the only image in the layout.
func layoutDigest(t *testing.T, dir string) string {
	t.Helper()
	_, desc := onlyImage(t, dir)
	return desc.Digest.String()
}

// noStrayTemps fails if an unpack left temporary directories behind.
func noStrayTemps(t *testing.T, cacheDir string) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(cacheDir, "rootfs"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name()[0] == '.' {
			t.Errorf("stray temporary %s in cache", e.Name())
		}
	}
}
