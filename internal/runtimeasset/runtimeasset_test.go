package runtimeasset

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// server serves body at /runsc (counting requests), blocks /slow until
// the client gives up, and answers 404 elsewhere.
type server struct {
	*httptest.Server
	body     atomic.Pointer[[]byte]
	requests atomic.Int64
}

func newServer(t *testing.T, body []byte) *server {
	t.Helper()
	s := &server{}
	s.body.Store(&body)
	mux := http.NewServeMux()
	mux.HandleFunc("/runsc", func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		_, _ = w.Write(*s.body.Load())
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func runscFor(arch, url string, sum string) []Asset {
	return []Asset{{Name: "runsc", Architecture: arch, URL: url, SHA256: sum}}
}

// wantVerified checks that path is where Resolve puts the file, is
// executable and holds content.
func wantVerified(t *testing.T, cache, path string, content []byte) {
	t.Helper()
	if want := filepath.Join(cache, digest(content), "runsc"); path != want {
		t.Errorf("path %s, want %s", path, want)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", fi.Mode().Perm())
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, content) {
		t.Errorf("content %q, want %q", got, content)
	}
}

// wantNothingLeft checks that a failed Resolve left nothing of the
// digest in the cache: no final file, no temp file, no directory.
func wantNothingLeft(t *testing.T, cache, sum string) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(cache, sum))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s left in the cache: %v (%v)", sum, entries, err)
	}
}

func TestResolveFetchesOnceAndReusesVerified(t *testing.T) {
	content := []byte("#!/bin/sh\necho runsc\n")
	srv := newServer(t, content)
	cache := t.TempDir()
	opts := Options{CacheDir: cache, Arch: "amd64"}
	assets := append(runscFor("amd64", srv.URL+"/runsc", digest(content)),
		Asset{Name: "runsc", Architecture: "arm64", URL: srv.URL + "/arm64/runsc", SHA256: sumB})

	path, err := Resolve(t.Context(), opts, "runsc", assets)
	if err != nil {
		t.Fatal(err)
	}
	wantVerified(t, cache, path, content)
	if n := srv.requests.Load(); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}

	// A verified file is not fetched again, and lost execute bits are
	// given back.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := Resolve(t.Context(), opts, "runsc", assets)
	if err != nil || again != path {
		t.Fatalf("second Resolve = %s, %v; want %s", again, err, path)
	}
	wantVerified(t, cache, again, content)
	if n := srv.requests.Load(); n != 1 {
		t.Errorf("%d requests, want the cached file reused", n)
	}
}

func TestResolveTamperedCache(t *testing.T) {
	content := []byte("the real runsc")
	for _, tc := range []struct {
		name string
		// serves is what the server has after the cache was tampered.
		serves []byte
		err    string
	}{
		{"refetched", content, ""},
		{"server now serves other bytes", []byte("another runsc"),
			"has sha256 " + digest([]byte("another runsc")) + ", the SandboxConfig says " + digest(content) + ": refusing to run it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, content)
			cache := t.TempDir()
			opts := Options{CacheDir: cache, Arch: "amd64"}
			assets := runscFor("amd64", srv.URL+"/runsc", digest(content))
			path, err := Resolve(t.Context(), opts, "runsc", assets)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte("#!/bin/sh\nrm -rf /\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			srv.body.Store(&tc.serves)

			got, err := Resolve(t.Context(), opts, "runsc", assets)
			if n := srv.requests.Load(); n != 2 {
				t.Errorf("%d requests, want the tampered file fetched again", n)
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Resolve = %s, %v; want error containing %q", got, err, tc.err)
				}
				wantNothingLeft(t, cache, digest(content))
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantVerified(t, cache, got, content)
		})
	}
}

func TestResolve(t *testing.T) {
	content := []byte("runsc bytes")
	srv := newServer(t, content)
	src := filepath.Join(t.TempDir(), "runsc")
	if err := os.WriteFile(src, content, 0o644); err != nil {
		t.Fatal(err)
	}
	good := digest(content)
	for _, tc := range []struct {
		name   string
		opts   Options
		assets []Asset
		err    string // empty: content is resolved
	}{
		{"http", Options{}, runscFor("amd64", srv.URL+"/runsc", good), ""},
		{"file URL", Options{}, runscFor("amd64", "file://"+src, good), ""},
		{"file URL with localhost", Options{}, runscFor("amd64", "file://localhost"+src, good), ""},
		{"wrong digest", Options{}, runscFor("amd64", srv.URL+"/runsc", sumA),
			"runsc from " + srv.URL + "/runsc has sha256 " + good + ", the SandboxConfig says " + sumA + ": refusing to run it"},
		{"wrong digest from a file", Options{}, runscFor("amd64", "file://"+src, sumA), "refusing to run it"},
		{"404", Options{}, runscFor("amd64", srv.URL+"/missing", sumA),
			"fetch runsc from " + srv.URL + "/missing: HTTP status 404 Not Found"},
		{"missing file", Options{}, runscFor("amd64", "file:///nonexistent/runsc", sumA), "fetch runsc from file:///nonexistent/runsc: open /nonexistent/runsc"},
		{"file URL names a directory", Options{}, runscFor("amd64", "file://"+filepath.Dir(src), sumA), "is not a regular file"},
		{"no asset for the architecture", Options{Arch: "arm64"}, runscFor("amd64", srv.URL+"/runsc", good),
			"no runsc for this machine's architecture arm64 (given: amd64)"},
		{"no assets", Options{}, nil, "no runsc for this machine's architecture amd64 (given: none)"},
		{"only other names", Options{}, []Asset{{Name: "other", Architecture: "amd64", URL: srv.URL + "/runsc", SHA256: good}},
			"(given: none)"},
		{"twice for the architecture", Options{}, append(runscFor("amd64", srv.URL+"/runsc", good), runscFor("amd64", "file://"+src, good)...),
			"runsc is given 2 times for amd64"},
		{"malformed asset", Options{}, runscFor("amd64", "ftp://example.com/runsc", good), "runsc for amd64: url"},
		{"declared length over the bound", Options{MaxBytes: 4}, runscFor("amd64", srv.URL+"/runsc", good), "larger than 4 bytes"},
		{"file over the bound", Options{MaxBytes: 4}, runscFor("amd64", "file://"+src, good), "larger than 4 bytes: refusing it"},
		{"timeout", Options{Timeout: 50 * time.Millisecond}, runscFor("amd64", srv.URL+"/slow", good), "context deadline exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := t.TempDir()
			tc.opts.CacheDir = cache
			tc.opts.Arch = cmp.Or(tc.opts.Arch, "amd64")
			path, err := Resolve(t.Context(), tc.opts, "runsc", tc.assets)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Resolve = %s, %v; want error containing %q", path, err, tc.err)
				}
				for _, a := range tc.assets {
					wantNothingLeft(t, cache, a.SHA256)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantVerified(t, cache, path, content)
		})
	}
}

func TestResolveCancelled(t *testing.T) {
	srv := newServer(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := Resolve(ctx, Options{CacheDir: t.TempDir(), Arch: "amd64"}, "runsc", runscFor("amd64", srv.URL+"/runsc", sumA))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Resolve = %v, want context.Canceled", err)
	}
}

func TestResolveNeedsCacheDir(t *testing.T) {
	if _, err := Resolve(t.Context(), Options{}, "runsc", nil); err == nil || !strings.Contains(err.Error(), "CacheDir is required") {
		t.Fatalf("Resolve = %v", err)
	}
}
