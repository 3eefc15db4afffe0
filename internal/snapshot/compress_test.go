package snapshot

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCompressedLocal: a compressing Local keeps compressible files of
// its size range as name.zst, leaves the rest, and Open gives back every
// file as written in a scratch directory that Close removes.
func TestCompressedLocal(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	l, err := NewLocalWith(root, LocalOptions{Compress: true})
	if err != nil {
		t.Fatal(err)
	}
	random := make([]byte, 64<<10)
	_, _ = rand.Read(random)
	files := map[string][]byte{
		"pages.img":           bytes.Repeat([]byte("page "), 100<<10), // compressible: kept as .zst
		"checkpoint.img":      random,                                 // incompressible: as is
		"pages_meta.img":      []byte("small"),                        // below the minimum: as is
		"volumes/v/x":         bytes.Repeat([]byte{1}, 8<<10),         // its .zst name is taken: as is
		"volumes/v/x.zst":     []byte("a user's file"),
		"volumes/v/big.bin":   make([]byte, maxCompressBytes+1), // above the maximum: as is
		"volumes/v/sub/z.txt": bytes.Repeat([]byte("z"), 5<<10),
	}
	st, err := l.Stage("a-uid", "")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		p := filepath.Join(st.Dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ref, err := l.Commit(ctx, st, ScopeFull)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, Bare(ref))
	m, err := ReadManifest(dir, ref)
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]string{}
	for _, f := range m.Files {
		recorded[f.Name] = f.Compression
	}
	for _, tc := range []struct {
		name       string
		compressed bool
	}{
		{"pages.img", true}, {"checkpoint.img", false}, {"pages_meta.img", false},
		{"volumes/v/x", false}, {"volumes/v/big.bin", false}, {"volumes/v/sub/z.txt", true},
	} {
		_, errPlain := os.Stat(filepath.Join(dir, tc.name))
		if (recorded[tc.name] == CompressionZstd) != tc.compressed || (errPlain == nil) == tc.compressed {
			t.Errorf("%s: manifest compression %q, plain file kept %v; want compressed %v", tc.name, recorded[tc.name], errPlain == nil, tc.compressed)
		}
	}
	o, err := l.Open(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(o.Dir, filepath.FromSlash(name)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("opened %s: %d bytes, %v; want its %d bytes", name, len(got), err, len(want))
		}
	}
	scratch := o.Dir
	o.Close()
	if _, err := os.Stat(scratch); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("scratch directory %s left after Close: %v", scratch, err)
	}

	// A clone shares the compressed files and opens alike.
	clone, err := l.Clone(ctx, ref, "b-uid", "")
	if err != nil {
		t.Fatal(err)
	}
	o, err = l.Open(ctx, clone)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(o.Dir, "pages.img")); !bytes.Equal(got, files["pages.img"]) {
		t.Errorf("clone's pages.img differs")
	}
	o.Close()

	// A compressed file that no longer inflates to its size is corrupt,
	// and the failed Open leaves no scratch directory.
	z := filepath.Join(dir, "pages.img"+ZstdSuffix)
	info, _ := os.Stat(z)
	if err := os.WriteFile(z, make([]byte, info.Size()), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Open(ctx, ref); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open of a garbled compressed file = %v, want ErrCorrupt", err)
	}
	if left, _ := os.ReadDir(filepath.Join(root, ".open")); len(left) != 0 {
		t.Errorf("failed Open left %d scratch directories", len(left))
	}
}

// TestUncompressedLocalReadsCompressed: a Local that does not compress
// (a node's paused store, an older configuration) still opens snapshots
// a compressing one wrote in the same directory.
func TestUncompressedLocalReadsCompressed(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	w, err := NewLocalWith(root, LocalOptions{Compress: true})
	if err != nil {
		t.Fatal(err)
	}
	st, err := w.Stage("a-uid", "")
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("state "), 10<<10)
	if err := os.WriteFile(filepath.Join(st.Dir, "pages.img"), want, 0o600); err != nil {
		t.Fatal(err)
	}
	ref, err := w.Commit(ctx, st, ScopeFull)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	o, err := r.Open(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if got, _ := os.ReadFile(filepath.Join(o.Dir, "pages.img")); !bytes.Equal(got, want) {
		t.Fatalf("pages.img read back differs (%d bytes, want %d)", len(got), len(want))
	}
}

// BenchmarkLocalCompression weighs what compression costs a counter-sized
// snapshot in the local store: Commit (compress, fsync) and Open
// (inflate into a scratch directory; in place when nothing is
// compressed), and the bytes stored. The files are synthetic (a 1.3 MB
// page file of which each 4 KiB page has 800 random bytes, a 200 KB
// state file alike, as zstd sees a counter's: ~5×) unless
// ATE_BENCH_SNAPSHOT_DIR names a directory of real checkpoint files
// (e.g. a node's paused snapshot).
func BenchmarkLocalCompression(b *testing.B) {
	files := map[string][]byte{"pages.img": pageLike(1344 << 10), "checkpoint.img": pageLike(200 << 10), "pages_meta.img": pageLike(2 << 10)}
	if dir := os.Getenv("ATE_BENCH_SNAPSHOT_DIR"); dir != "" {
		files = map[string][]byte{}
		entries, err := os.ReadDir(dir)
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range entries {
			if e.Type().IsRegular() && e.Name() != ManifestName {
				if files[e.Name()], err = os.ReadFile(filepath.Join(dir, e.Name())); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	for _, compress := range []bool{false, true} {
		name := "plain"
		if compress {
			name = "zstd"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			root := b.TempDir()
			l, err := NewLocalWith(root, LocalOptions{Compress: compress})
			if err != nil {
				b.Fatal(err)
			}
			var commit, open time.Duration
			var stored int64
			for b.Loop() {
				st, err := l.Stage("bench", "")
				if err != nil {
					b.Fatal(err)
				}
				for n, data := range files {
					if err := os.WriteFile(filepath.Join(st.Dir, n), data, 0o600); err != nil {
						b.Fatal(err)
					}
				}
				t0 := time.Now()
				ref, err := l.Commit(ctx, st, ScopeFull)
				commit += time.Since(t0)
				if err != nil {
					b.Fatal(err)
				}
				t0 = time.Now()
				o, err := l.Open(ctx, ref)
				open += time.Since(t0)
				if err != nil {
					b.Fatal(err)
				}
				o.Close()
				stored = 0
				for _, f := range o.Manifest.Files {
					stored += f.storedSize()
				}
				if err := l.Delete(ctx, ref); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(commit.Microseconds())/1000/float64(b.N), "commit-ms")
			b.ReportMetric(float64(open.Microseconds())/1000/float64(b.N), "open-ms")
			b.ReportMetric(float64(stored)/1024, "stored-KiB")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// pageLike returns n bytes in 4 KiB pages of 800 random bytes and zeros.
func pageLike(n int) []byte {
	data := make([]byte, n)
	for off := 0; off < n; off += 4096 {
		_, _ = rand.Read(data[off:min(n, off+800)])
	}
	return data
}
