package s3_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/snapshot/s3"
	"substrate.dev/ate/internal/snapshot/snapshottest"
)

// TestRoundTrip: what Commit uploads, Open on another node (an empty
// cache) downloads byte for byte, a multipart-sized file, nested volume
// directories, modes, a symlink and an empty directory included.
func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		compression string
		suffix      string // of the large file's key
	}{
		{s3.CompressionZstd, ".zst"},
		{s3.CompressionNone, ""},
	} {
		t.Run(tc.compression, func(t *testing.T) {
			prefix := testPrefix(t)
			cfg := config(t, prefix)
			cfg.Compression = tc.compression
			files := checkpointFiles(t, 12<<20) // > 2 parts of 5 MiB
			ref := commit(t, newStore(t, cfg), "actor-uid", files)

			keys, err := srv.Keys(ctx, prefix+"/")
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"manifest.json", "pages.img" + tc.suffix, "volumes/data/a/b/run.sh" + tc.suffix} {
				if !slices.Contains(keys, prefix+"/"+snapshot.Bare(ref)+"/"+k) {
					t.Errorf("no object %s in %v", k, keys)
				}
			}

			other := config(t, prefix) // another node: its own cache
			other.Compression = tc.compression
			o, err := newStore(t, other).Open(ctx, ref)
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			checkFiles(t, o.Dir, files)
			for _, f := range o.Manifest.Files {
				if want := map[string]string{"zstd": "zstd"}[tc.compression]; len(f.SHA256) != 64 || f.Compression != want {
					t.Errorf("manifest entry %+v: want a sha256 and compression %q", f, want)
				}
				if f.Name == "pages.img" && tc.compression == s3.CompressionZstd && f.StoredSize >= f.Size/2 {
					t.Errorf("pages.img (3/4 zero pages) stored in %d of %d bytes", f.StoredSize, f.Size)
				}
			}
			if o.Manifest.Ref != snapshot.Bare(ref) || o.Manifest.Scope != snapshot.ScopeFull {
				t.Errorf("manifest %+v", o.Manifest)
			}
		})
	}
}

// TestCacheHitReadsNoObjectStorage: a snapshot committed (or once
// downloaded) on this node opens from the cache without a request, also
// after the store is reopened on the same cache directory.
func TestCacheHitReadsNoObjectStorage(t *testing.T) {
	ctx := context.Background()
	cfg := config(t, testPrefix(t))
	ct := &countingTransport{}
	cfg.Transport = ct
	s := newStore(t, cfg)
	files := checkpointFiles(t, 1<<20)
	ref := commit(t, s, "actor-uid", files)

	before := ct.n.Load()
	o, err := s.Open(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, o.Dir, files)
	o.Close()
	if n := ct.n.Load() - before; n != 0 {
		t.Fatalf("Open after Commit made %d requests, want 0", n)
	}

	reopened := newStore(t, cfg) // index rebuilt from disk
	before = ct.n.Load()
	o, err = reopened.Open(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	o.Close()
	if n := ct.n.Load() - before; n != 0 {
		t.Fatalf("Open after restart made %d requests, want 0", n)
	}
	if bytes, n := reopened.CacheStats(); n != 1 || bytes != sizeOf(files) {
		t.Fatalf("CacheStats = %d bytes, %d snapshots; want %d, 1", bytes, n, sizeOf(files))
	}
}

func sizeOf(files map[string][]byte) int64 {
	var n int64
	for _, b := range files {
		n += int64(len(b))
	}
	return n
}

// TestBadObjects: an object that does not match its manifest is
// ErrCorrupt naming the key (and, where the bytes decode, both
// checksums), never served, and leaves nothing in the cache, so the
// repaired snapshot then opens.
func TestBadObjects(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, compression, file string
		edit                    func([]byte) []byte
		want                    []string // in the error, besides the key
	}{
		{"flipped byte", s3.CompressionNone, "checkpoint.img", flip, []string{"sha256"}},
		{"flipped byte zstd", s3.CompressionZstd, "pages.img", flip, []string{"sha256"}},
		{"truncated", s3.CompressionNone, "pages.img", half, []string{"bytes, manifest says"}},
		{"truncated zstd", s3.CompressionZstd, "pages.img", half, []string{"sha256"}},
		{"missing", s3.CompressionZstd, "pages_meta.img", nil, []string{"missing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := testPrefix(t)
			cfg := config(t, prefix)
			cfg.Compression = tc.compression
			files := checkpointFiles(t, 6<<20)
			ref := commit(t, newStore(t, cfg), "actor-uid", files)
			key := prefix + "/" + snapshot.Bare(ref) + "/" + tc.file
			if tc.compression == s3.CompressionZstd {
				key += ".zst"
			}
			var orig []byte
			if err := srv.Rewrite(ctx, key, func(b []byte) []byte { orig = slices.Clone(b); return b }); err != nil {
				t.Fatal(err)
			}
			if tc.edit == nil {
				if err := srv.Remove(ctx, key); err != nil {
					t.Fatal(err)
				}
			} else if err := srv.Rewrite(ctx, key, tc.edit); err != nil {
				t.Fatal(err)
			}

			other := config(t, prefix)
			s := newStore(t, other)
			_, err := s.Open(ctx, ref)
			if !errors.Is(err, snapshot.ErrCorrupt) {
				t.Fatalf("Open = %v, want ErrCorrupt", err)
			}
			for _, w := range append(tc.want, key) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			if tc.name == "flipped byte" && len(sha256Hex.FindAllString(err.Error(), -1)) != 2 {
				t.Errorf("error %q does not give both checksums", err)
			}
			if _, n := s.CacheStats(); n != 0 {
				t.Fatalf("%d cache entries after a corrupt download", n)
			}
			if left, _ := os.ReadDir(filepath.Join(other.CacheDir, ".fetch")); len(left) != 0 {
				t.Fatalf("download leftovers: %v", left)
			}

			if err := srv.Put(ctx, key, orig); err != nil {
				t.Fatal(err)
			}
			o, err := s.Open(ctx, ref)
			if err != nil {
				t.Fatalf("Open after repair: %v", err)
			}
			checkFiles(t, o.Dir, files)
			o.Close()
		})
	}
}

var sha256Hex = regexp.MustCompile(`\b[0-9a-f]{64}\b`)

func flip(b []byte) []byte { b[len(b)/2] ^= 0xff; return b }
func half(b []byte) []byte { return b[:len(b)/2] }

// TestIncompleteSnapshot: without its manifest (a crash mid-upload) a
// snapshot is ErrNotFound to Open, yet List returns it so GC can delete
// it; a ref that never existed is ErrNotFound too.
func TestIncompleteSnapshot(t *testing.T) {
	ctx := context.Background()
	prefix := testPrefix(t)
	cfg := config(t, prefix)
	s := newStore(t, cfg)
	complete := commit(t, s, "a-uid", map[string][]byte{"f": []byte("x")})
	incomplete := commit(t, s, "b-uid", map[string][]byte{"f": []byte("y")})
	if err := srv.Remove(ctx, prefix+"/"+snapshot.Bare(incomplete)+"/"+snapshot.ManifestName); err != nil {
		t.Fatal(err)
	}

	fresh := newStore(t, config(t, prefix))
	for _, ref := range []string{incomplete, "a-uid/20260101T000000Z-0000000000000000"} {
		if _, err := fresh.Open(ctx, ref); !errors.Is(err, snapshot.ErrNotFound) {
			t.Errorf("Open(%s) = %v, want ErrNotFound", ref, err)
		}
	}
	for _, ref := range []string{"", "a", "a/", "/b", "../x", ".staging/x", "a/b/c"} {
		if _, err := fresh.Open(ctx, ref); !errors.Is(err, snapshot.ErrNotFound) {
			t.Errorf("Open(%q) = %v, want ErrNotFound", ref, err)
		}
	}
	refs, err := fresh.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{snapshot.Bare(complete), snapshot.Bare(incomplete)}; !slices.Equal(refs, want) {
		t.Fatalf("List = %v, want %v", refs, want)
	}
}

// TestDelete: Delete removes one ref's objects and cache entry, twice is
// fine; DeleteOwner removes an owner's and leaves the others'.
func TestDelete(t *testing.T) {
	ctx := context.Background()
	prefix := testPrefix(t)
	s := newStore(t, config(t, prefix))
	files := map[string][]byte{"f": []byte("x"), "volumes/v/g": []byte("y")}
	a1, a2 := commit(t, s, "a-uid", files), commit(t, s, "a-uid", files)
	b1 := commit(t, s, "b-uid", files)

	for range 2 {
		if err := s.Delete(ctx, a1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Open(ctx, a1); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("Open after Delete = %v", err)
	}
	if keys, _ := srv.Keys(ctx, prefix+"/"+snapshot.Bare(a1)+"/"); len(keys) != 0 {
		t.Fatalf("objects left after Delete: %v", keys)
	}
	if err := s.DeleteOwner(ctx, "a-uid"); err != nil {
		t.Fatal(err)
	}
	if keys, _ := srv.Keys(ctx, prefix+"/a-uid/"); len(keys) != 0 {
		t.Fatalf("objects left after DeleteOwner: %v", keys)
	}
	if _, err := s.Open(ctx, a2); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("Open of %s after DeleteOwner = %v", a2, err)
	}
	if refs, err := s.List(ctx); err != nil || !slices.Equal(refs, []string{snapshot.Bare(b1)}) {
		t.Fatalf("List = %v, %v; want [%s]", refs, err, b1)
	}
	if _, n := s.CacheStats(); n != 1 {
		t.Fatalf("%d cache entries, want 1 (%s)", n, b1)
	}
	if err := s.DeleteOwner(ctx, "../x"); err == nil {
		t.Fatal("DeleteOwner accepted a path")
	}
}

// TestEvictionRespectsPins: the cache evicts least recently used entries
// beyond its bound, never one that is open, and an entry deleted while
// open keeps its files until Close.
func TestEvictionRespectsPins(t *testing.T) {
	ctx := context.Background()
	cfg := config(t, testPrefix(t))
	files := map[string][]byte{"f": make([]byte, 1000)}
	cfg.CacheBytes = 2500 // two and a half snapshots
	ct := &countingTransport{}
	cfg.Transport = ct
	s := newStore(t, cfg)
	cached := func(ref string) bool {
		t.Helper()
		before := ct.n.Load()
		o, err := s.Open(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		o.Close()
		return ct.n.Load() == before
	}

	a := commit(t, s, "o", files)
	b := commit(t, s, "o", files)
	pinned, err := s.Open(ctx, a) // a: most recent, and pinned
	if err != nil {
		t.Fatal(err)
	}
	c := commit(t, s, "o", files) // evicts b, the least recent unpinned
	d := commit(t, s, "o", files) // evicts c; a is pinned though least recent
	if !cached(d) {
		t.Error("newest entry evicted")
	}
	if bytes, n := s.CacheStats(); n != 2 || bytes != 2000 {
		t.Errorf("CacheStats = %d bytes, %d; want a and d", bytes, n)
	}
	if _, err := os.Stat(filepath.Join(pinned.Dir, "f")); err != nil {
		t.Fatalf("pinned entry's file gone: %v", err)
	}
	if err := s.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(pinned.Dir, "f")); err != nil {
		t.Fatalf("file of an entry deleted while open gone before Close: %v", err)
	}
	pinned.Close()
	if _, err := os.Stat(pinned.Dir); !os.IsNotExist(err) {
		t.Fatalf("deleted entry still on disk after Close: %v", err)
	}
	if cached(b) || cached(c) {
		t.Error("evicted entries opened without a download")
	}
}

// TestImport: a paused (Local) snapshot uploads into the S3 store, with
// ScopeData only its volumes.
func TestImport(t *testing.T) {
	ctx := context.Background()
	local, err := snapshot.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	files := checkpointFiles(t, 64<<10)
	lref := commit(t, local, "a-uid", files)
	lo, err := local.Open(ctx, lref)
	if err != nil {
		t.Fatal(err)
	}
	defer lo.Close()
	prefix := testPrefix(t)
	s := newStore(t, config(t, prefix))
	ref, err := s.Import(ctx, "a-uid", "", lo.Dir, snapshot.ScopeData)
	if err != nil {
		t.Fatal(err)
	}
	o, err := newStore(t, config(t, prefix)).Open(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	volumes := map[string][]byte{}
	for name, b := range files {
		if strings.HasPrefix(name, snapshot.VolumesDir+"/") {
			volumes[name] = b
		}
	}
	checkFiles(t, o.Dir, volumes)
	if o.Manifest.Scope != snapshot.ScopeData {
		t.Fatalf("scope %s", o.Manifest.Scope)
	}
}

// TestClearStaging: staged leftovers go, committed snapshots stay.
func TestClearStaging(t *testing.T) {
	s := newStore(t, config(t, testPrefix(t)))
	st, err := s.Stage("a-uid", "")
	if err != nil {
		t.Fatal(err)
	}
	ref := commit(t, s, "a-uid", map[string][]byte{"f": []byte("x")})
	if err := s.ClearStaging(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(st.Dir); !os.IsNotExist(err) {
		t.Fatalf("staged dir survived: %v", err)
	}
	o, err := s.Open(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	o.Close()
	if _, err := s.Stage("a/b", ""); err == nil {
		t.Fatal("Stage accepted an owner with a slash")
	}
}

// TestConcurrentOpens: Opens of one ref racing a cold cache all get the
// verified files, and the cache ends with one entry.
func TestConcurrentOpens(t *testing.T) {
	ctx := context.Background()
	prefix := testPrefix(t)
	files := checkpointFiles(t, 1<<20)
	ref := commit(t, newStore(t, config(t, prefix)), "a-uid", files)
	s := newStore(t, config(t, prefix))
	type result struct {
		o   *snapshot.Opened
		err error
	}
	results := make(chan result, 4)
	for range 4 {
		go func() {
			o, err := s.Open(ctx, ref)
			results <- result{o, err}
		}()
	}
	for range 4 {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		checkFiles(t, r.o.Dir, files)
		defer r.o.Close()
	}
	if _, n := s.CacheStats(); n != 1 {
		t.Fatalf("%d cache entries, want 1", n)
	}
}

// TestConformance: the S3 store does what every snapshot store does.
func TestConformance(t *testing.T) {
	snapshottest.Run(t, func(t *testing.T) snapshot.Store { return newStore(t, config(t, testPrefix(t))) })
}

// TestSubstitutedByAnotherNode: a compromised node holds the bucket's
// keys, as every node does, and rewrites another actor's snapshot under
// its reference, files and manifest consistent (its own Commit does the
// hashing). A node opening the recorded reference with an empty cache
// refuses it by the manifest digest, downloads nothing into its cache,
// and a node whose cache holds the committed copy keeps serving that
// copy, not the rewrite.
func TestSubstitutedByAnotherNode(t *testing.T) {
	ctx := context.Background()
	prefix := testPrefix(t)
	owner := newStore(t, config(t, prefix))
	files := checkpointFiles(t, 1<<20)
	victim := commit(t, owner, "victim-uid", files)
	_, id, err := snapshot.SplitRef(victim)
	if err != nil {
		t.Fatal(err)
	}

	attacker := newStore(t, config(t, prefix))
	if err := attacker.Delete(ctx, snapshot.Bare(victim)); err != nil {
		t.Fatal(err)
	}
	st, err := attacker.Stage("victim-uid", id)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"checkpoint.img": []byte("attacker's memory"), "volumes/data/planted": []byte("x")} {
		p := filepath.Join(st.Dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	forged, err := attacker.Commit(ctx, st, snapshot.ScopeFull)
	if err != nil {
		t.Fatal(err)
	}
	if snapshot.Bare(forged) != snapshot.Bare(victim) {
		t.Fatalf("forgery at %s, victim at %s", forged, victim)
	}

	cfg := config(t, prefix)
	fresh := newStore(t, cfg)
	if o, err := fresh.Open(ctx, victim); !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), "manifest digest") {
		if o != nil {
			o.Close()
		}
		t.Fatalf("Open of the rewritten snapshot on another node = %v, want ErrCorrupt naming the manifest digest", err)
	}
	if _, n := fresh.CacheStats(); n != 0 {
		t.Fatalf("%d cache entries after a refused download", n)
	}
	if left, _ := os.ReadDir(filepath.Join(cfg.CacheDir, ".fetch")); len(left) != 0 {
		t.Fatalf("download leftovers: %v", left)
	}

	o, err := owner.Open(ctx, victim)
	if err != nil {
		t.Fatalf("the committing node's cached copy: %v", err)
	}
	defer o.Close()
	checkFiles(t, o.Dir, files)
}

// TestManifestLinksStayInTheSnapshot: a compromised node checkpoints an
// actor it hosts with a manifest whose symlinks chain — a link evil → a
// host directory, then a link evil/planted — and the API server records
// that manifest's digest (the node's own actor). Another node that opens
// the snapshot refuses it as corrupt and creates nothing in the host
// directory.
func TestManifestLinksStayInTheSnapshot(t *testing.T) {
	ctx := context.Background()
	prefix := testPrefix(t)
	ref := commit(t, newStore(t, config(t, prefix)), "actor-uid", checkpointFiles(t, 1<<20))
	key := prefix + "/" + snapshot.Bare(ref) + "/" + snapshot.ManifestName
	host := t.TempDir() // stands for /etc on the opening node
	var forged []byte
	if err := srv.Rewrite(ctx, key, func(b []byte) []byte {
		var m snapshot.Manifest
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		m.Symlinks = append(m.Symlinks, snapshot.Symlink{Name: "volumes/data/evil", Target: host},
			snapshot.Symlink{Name: "volumes/data/evil/planted", Target: "/payload"})
		out, err := json.Marshal(&m)
		if err != nil {
			t.Fatal(err)
		}
		forged = out
		return out
	}); err != nil {
		t.Fatal(err)
	}
	recorded := snapshot.WithDigest(snapshot.Bare(ref), forged)

	cfg := config(t, prefix)
	o, err := newStore(t, cfg).Open(ctx, recorded)
	if o != nil {
		o.Close()
	}
	if !errors.Is(err, snapshot.ErrCorrupt) {
		t.Errorf("Open of a manifest whose links chain out of the snapshot = %v, want ErrCorrupt", err)
	}
	if left, _ := os.ReadDir(host); len(left) != 0 {
		t.Fatalf("the opening node created %v in a host directory", left)
	}
}
