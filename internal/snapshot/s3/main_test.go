package s3_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/snapshot/s3"
	"substrate.dev/ate/internal/snapshot/s3/s3test"
)

// srv is the one SeaweedFS of this test binary (weed takes seconds to
// start); every test works under its own key prefix.
var srv *s3test.Server

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "s3store-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv, err = s3test.Start(context.Background(), dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "s3test: weed ready in %s\n", srv.StartupTime.Round(1e6))
	code := m.Run()
	_ = srv.Close()
	os.RemoveAll(dir)
	// Every Store's transfers, listings and compressors, and s3test's
	// process watcher, must have ended by now.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// countingTransport counts the requests that reach object storage.
type countingTransport struct {
	n atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

// prefixSeq keeps prefixes unique when a test asks for several.
var prefixSeq atomic.Int64

// testPrefix is a key prefix no other test uses.
func testPrefix(t testing.TB) string {
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	return fmt.Sprintf("t/%s-%d", name, prefixSeq.Add(1))
}

// config is a Config for prefix on srv, with a fresh cache directory and
// the 5 MiB minimum part size, so a 12 MiB file is a multipart upload.
func config(t testing.TB, prefix string) s3.Config {
	cfg, err := s3.ParseURL(srv.URL(prefix))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Creds = srv.Creds()
	cfg.CacheDir = t.TempDir()
	cfg.PartSize = 5 << 20
	return cfg
}

func newStore(t testing.TB, cfg s3.Config) *s3.Store {
	t.Helper()
	s, err := s3.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkpointFiles resembles a runsc checkpoint plus a volume: a large
// pages file (zero pages with random ones among them, larger than one
// part), a random checkpoint.img, small metadata, and volume files, one
// nested and executable, one empty.
func checkpointFiles(t testing.TB, pagesBytes int) map[string][]byte {
	pages := make([]byte, pagesBytes)
	for off := 0; off+4096 <= len(pages); off += 4 * 4096 {
		_, _ = rand.Read(pages[off : off+4096]) // one page in four holds data
	}
	img := make([]byte, 200<<10)
	_, _ = rand.Read(img)
	return map[string][]byte{
		"pages.img":                     pages,
		"checkpoint.img":                img,
		"pages_meta.img":                bytes.Repeat([]byte("meta"), 700),
		"volumes/data/a/b/run.sh":       []byte("#!/bin/sh\necho hi\n"),
		"volumes/data/empty-file":       {},
		"volumes/data/a/" + "notes.txt": []byte("notes"),
	}
}

// stage writes files into a new staged snapshot of owner, plus a symlink
// and an empty directory, and returns it.
func stage(t testing.TB, s snapshot.Store, owner string, files map[string][]byte) *snapshot.Staged {
	t.Helper()
	st, err := s.Stage(owner, "")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		p := filepath.Join(st.Dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(p, data, mode); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := files["volumes/data/a/b/run.sh"]; ok {
		if err := os.Symlink("a/b/run.sh", filepath.Join(st.Dir, "volumes/data/run")); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(st.Dir, "volumes/empty"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

func commit(t testing.TB, s snapshot.Store, owner string, files map[string][]byte) string {
	t.Helper()
	st := stage(t, s, owner, files)
	ref, err := s.Commit(context.Background(), st, snapshot.ScopeFull)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// checkFiles fails unless dir holds exactly files (plus the manifest, the
// symlink and the empty directory stage adds).
func checkFiles(t testing.TB, dir string, files map[string][]byte) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if rel == snapshot.ManifestName {
			return nil
		}
		n++
		want, ok := files[rel]
		got, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !ok || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, want %d (known: %v)", rel, len(got), len(want), ok)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != len(files) {
		t.Errorf("%d files in %s, want %d", n, dir, len(files))
	}
	if _, ok := files["volumes/data/a/b/run.sh"]; !ok {
		return
	}
	if st, err := os.Stat(filepath.Join(dir, "volumes/data/a/b/run.sh")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("run.sh mode: %v, %v; want 0755", st.Mode(), err)
	}
	if target, err := os.Readlink(filepath.Join(dir, "volumes/data/run")); err != nil || target != "a/b/run.sh" {
		t.Errorf("symlink: %q, %v", target, err)
	}
	if st, err := os.Stat(filepath.Join(dir, "volumes/empty")); err != nil || !st.IsDir() {
		t.Errorf("empty directory: %v", err)
	}
}
