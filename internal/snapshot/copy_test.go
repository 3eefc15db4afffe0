package snapshot

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// hostSecret makes a directory outside any tree being copied holding one
// file, "secret", as a host file the node can read but an actor must
// never get (the admin token, pki/ca.key), and returns the directory and
// the file's contents.
func hostSecret(t *testing.T) (dir string, secret []byte) {
	t.Helper()
	dir = t.TempDir()
	secret = []byte("HOST-SECRET-" + rand.Text())
	if err := os.WriteFile(filepath.Join(dir, "secret"), secret, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // the attack must not have changed the host file either
		got, err := os.ReadFile(filepath.Join(dir, "secret"))
		if err != nil || !bytes.Equal(got, secret) {
			t.Errorf("host secret now %q, %v; want it untouched", got, err)
		}
	})
	return dir, secret
}

// assertNoSecret fails t if any regular file under dir holds secret. It
// reads without following symlinks, as whoever gets the copy (the actor)
// would find only what the copy holds.
func assertNoSecret(t *testing.T, dir string, secret []byte) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, secret) {
			t.Errorf("the copy's %s holds the host's secret", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// writeFiles creates files (relative path → contents) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// swapForSymlink replaces p (a file or a directory) by a symlink to
// target, as an actor does in its volume.
func swapForSymlink(t *testing.T, p, target string) {
	t.Helper()
	if err := os.RemoveAll(p); err != nil {
		t.Error(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Error(err)
	}
}

// TestCopyTreeNeverFollowsASwappedInSymlink: an actor swaps an entry of its
// volume for a symlink to a host file or directory after the copy has
// listed the volume and before it opens the entry (skip runs exactly
// there). The copy must hold the symlink, or nothing, but never the bytes
// of the host file: a node that copies as root would hand them to the
// actor in the fork.
func TestCopyTreeNeverFollowsASwappedInSymlink(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		swap  string // the entry swapped
		file  bool   // swapped for a symlink to the secret file, else to its directory
	}{
		{"file for a host file", map[string]string{"a": "mine", "b": "mine"}, "a", true},
		{"directory for a host directory", map[string]string{"d/x": "mine", "e": "mine"}, "d", false},
		{"nested file for a host file", map[string]string{"d/x": "mine"}, "d/x", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host, secret := hostSecret(t)
			target := host
			if tc.file {
				target = filepath.Join(host, "secret")
			}
			src, dst := t.TempDir(), filepath.Join(t.TempDir(), "copy")
			writeFiles(t, src, tc.files)
			err := CopyTree(dst, src, func(rel string) bool {
				if rel == tc.swap {
					swapForSymlink(t, filepath.Join(src, filepath.FromSlash(rel)), target)
				}
				return false
			})
			if err != nil {
				t.Fatalf("CopyTree: %v", err)
			}
			assertNoSecret(t, dst, secret)
			got, err := os.Readlink(filepath.Join(dst, filepath.FromSlash(tc.swap)))
			if err != nil || got != target {
				t.Errorf("copy of %s: Readlink = %q, %v; want the symlink as the actor left it (%q)", tc.swap, got, err, target)
			}
		})
	}
}

// TestCopyTreeEntryChangesBetweenLookAndOpen: the narrower window, between
// CopyTree's look at an entry and its open. An entry swapped once is
// copied as what it became; one that keeps changing fails the copy with
// ErrTreeChanged. Neither copy holds the host's bytes.
func TestCopyTreeEntryChangesBetweenLookAndOpen(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entry   string // "a", a file, or "d", a directory
		always  bool   // swap back and forth on every look, not once
		wantErr error
	}{
		{"file swapped once", "a", false, nil},
		{"directory swapped once", "d", false, nil},
		{"file swapped on every look", "a", true, ErrTreeChanged},
		{"directory swapped on every look", "d", true, ErrTreeChanged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host, secret := hostSecret(t)
			src, dst := t.TempDir(), filepath.Join(t.TempDir(), "copy")
			writeFiles(t, src, map[string]string{"a": "mine", "d/x": "mine"})
			p := filepath.Join(src, tc.entry)
			looks := 0
			err := copyTree(dst, src, src, nil, nil, func(rel string) {
				if rel != tc.entry || (!tc.always && looks > 0) {
					return
				}
				looks++
				if fi, err := os.Lstat(p); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
					// Back to what the actor had, so the next look
					// sees it and the open finds a symlink again.
					_ = os.Remove(p)
					writeFiles(t, src, map[string]string{"a": "mine", "d/x": "mine"})
					return
				}
				target := host
				if tc.entry == "a" {
					target = filepath.Join(host, "secret")
				}
				swapForSymlink(t, p, target)
			})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("copyTree = %v; want %v", err, tc.wantErr)
			}
			assertNoSecret(t, dst, secret)
			if tc.wantErr == nil {
				if _, err := os.Readlink(filepath.Join(dst, tc.entry)); err != nil {
					t.Errorf("copy of %s is not the symlink it became: %v", tc.entry, err)
				}
			}
		})
	}
}

// TestCopyTreeSwapLoop: an actor swaps its volume's directories with
// symlinks to a host directory in a loop (renameat2 RENAME_EXCHANGE, so
// every name always exists) for as long as the copy runs, a large file
// first so that the loop has time. The copy may fail with ErrTreeChanged
// but must hold none of the host's bytes.
func TestCopyTreeSwapLoop(t *testing.T) {
	host, secret := hostSecret(t)
	base := t.TempDir()
	src, links, dst := filepath.Join(base, "vol"), filepath.Join(base, "links"), filepath.Join(base, "copy")
	files := map[string]string{"0big": string(bytes.Repeat([]byte{'x'}, 16<<20))}
	const victims = 64
	for i := range victims {
		files[fmt.Sprintf("v%02d/f", i)] = "mine"
	}
	writeFiles(t, src, files)
	if err := os.Mkdir(links, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range victims {
		if err := os.Symlink(host, filepath.Join(links, fmt.Sprintf("v%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			for i := range victims {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("v%02d", i)
				if err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(src, name), unix.AT_FDCWD, filepath.Join(links, name), unix.RENAME_EXCHANGE); err != nil {
					t.Error(err)
					return
				}
			}
		}
	})
	err := CopyTree(dst, src, nil)
	close(stop)
	wg.Wait()
	assertNoSecret(t, dst, secret)
	if err != nil && !errors.Is(err, ErrTreeChanged) {
		t.Fatalf("CopyTree = %v; want success or ErrTreeChanged", err)
	}
}

// TestCopyTreeCopies: what CopyTree keeps of a tree (directories, files
// and their permission bits, symlinks as symlinks whatever they point to)
// and leaves out (FIFOs, skipped paths, entries deleted while it runs).
func TestCopyTreeCopies(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "copy")
	writeFiles(t, src, map[string]string{"a": "A", "d/b": "B", "d/e/c": "C", "skip/x": "X", "gone": "G"})
	if err := os.Chmod(filepath.Join(src, "a"), 0o751); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(src, "d/e"), 0o750); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"rel": "d/b", "abs": "/etc/passwd", "dangling": "nowhere", "d/up": "../a"} {
		if err := os.Symlink(target, filepath.Join(src, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := CopyTree(dst, src, func(rel string) bool {
		if rel == "gone" {
			_ = os.Remove(filepath.Join(src, "gone")) // deleted between listing and copy
		}
		return rel == "skip"
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a": "A", "d/b": "B", "d/e/c": "C"} {
		if got, err := os.ReadFile(filepath.Join(dst, name)); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
	for name, want := range map[string]fs.FileMode{"a": 0o751, "d/e": 0o750 | fs.ModeDir} {
		if fi, err := os.Lstat(filepath.Join(dst, name)); err != nil || fi.Mode() != want {
			t.Errorf("mode of %s = %v, %v; want %v", name, fi.Mode(), err, want)
		}
	}
	for name, want := range map[string]string{"rel": "d/b", "abs": "/etc/passwd", "dangling": "nowhere", "d/up": "../a"} {
		if got, err := os.Readlink(filepath.Join(dst, name)); err != nil || got != want {
			t.Errorf("symlink %s = %q, %v; want %q", name, got, err, want)
		}
	}
	for _, name := range []string{"skip", "fifo", "gone"} {
		if _, err := os.Lstat(filepath.Join(dst, name)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s copied (%v); want it left out", name, err)
		}
	}
}

// BenchmarkCopyTree copies a 100 MB volume as a live checkpoint does:
// few large files, and many small ones (where the per-entry system calls
// that keep the copy off symlinks weigh most).
func BenchmarkCopyTree(b *testing.B) {
	for _, bc := range []struct {
		name  string
		files int
	}{{"100x1MB", 100}, {"1000x100KB", 1000}} {
		b.Run(bc.name, func(b *testing.B) {
			src := b.TempDir()
			size := (100 << 20) / bc.files
			data := make([]byte, size)
			_, _ = rand.Read(data)
			for i := range bc.files {
				p := filepath.Join(src, fmt.Sprintf("d%02d", i%50), fmt.Sprintf("f%05d", i))
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					b.Fatal(err)
				}
				if err := os.WriteFile(p, data, 0o644); err != nil {
					b.Fatal(err)
				}
			}
			base := b.TempDir()
			b.SetBytes(int64(size * bc.files))
			b.ResetTimer()
			for i := range b.N {
				dst := filepath.Join(base, fmt.Sprint(i))
				if err := CopyTree(dst, src, nil); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := os.RemoveAll(dst); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// TestCopyTreeWithin: an actor's volume bounds what the node copies out
// of it. A 1 TiB sparse file (one ftruncate for the actor) fails the copy
// before a byte of it is written, and so do more entries than allowed;
// a tree within the limits copies whole.
func TestCopyTreeWithin(t *testing.T) {
	src := t.TempDir()
	for i := range 4 {
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("f%d", i)), make([]byte, 1000), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := CopyTreeWithin(filepath.Join(t.TempDir(), "ok"), src, Limits{Bytes: 4000, Entries: 4}); err != nil {
		t.Fatalf("a tree of exactly the limits: %v", err)
	}
	for _, tc := range []struct {
		name string
		lim  Limits
	}{
		{"bytes", Limits{Bytes: 3999}},
		{"entries", Limits{Entries: 3}},
	} {
		if err := CopyTreeWithin(filepath.Join(t.TempDir(), tc.name), src, tc.lim); !errors.Is(err, ErrTooLarge) {
			t.Errorf("%s one over the limit: %v, want ErrTooLarge", tc.name, err)
		}
	}

	sparse := filepath.Join(src, "zz-sparse")
	if err := os.WriteFile(sparse, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(sparse, 1<<40); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "sparse")
	if err := CopyTreeWithin(dst, src, Limits{Bytes: 1 << 20}); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "zz-sparse") {
		t.Fatalf("a 1 TiB sparse file under a 1 MiB limit: %v, want ErrTooLarge naming it", err)
	}
	if got := TreeSize(dst); got > 1<<20 {
		t.Errorf("the failed copy wrote %d bytes, more than the limit", got)
	}
	if err := os.Remove(sparse); err != nil {
		t.Fatal(err)
	}

	// Shape: each directory level holds two descriptors during the copy,
	// and a path past PATH_MAX copies but never opens again at restore.
	deep := src
	for range MaxTreeDepth + 1 {
		deep = filepath.Join(deep, "d")
	}
	long := src
	for range MaxTreePathBytes/200 + 1 {
		long = filepath.Join(long, strings.Repeat("n", 199))
	}
	for _, tc := range []struct{ name, dir, want string }{
		{"deep", deep, "deeper than"},
		{"long", long, "longer than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.MkdirAll(tc.dir, 0o755); err != nil {
				t.Fatal(err)
			}
			top, _, _ := strings.Cut(strings.TrimPrefix(tc.dir, src+"/"), "/")
			defer os.RemoveAll(filepath.Join(src, top))
			err := CopyTreeWithin(filepath.Join(t.TempDir(), "v"), src, Limits{})
			if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("a tree %s: %v, want ErrTooLarge %q", tc.name, err, tc.want)
			}
			// The error reaches the actor's owner: the volume, not the
			// host path.
			if strings.Contains(err.Error(), filepath.Dir(src)) {
				t.Errorf("error names the host path %s: %v", src, err)
			}
		})
	}
}
