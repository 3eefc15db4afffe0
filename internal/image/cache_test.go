package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"substrate.dev/ate/internal/testwait"
)

// packed packs the writeFiles tree and returns the source and layout dirs.
func packed(t *testing.T, compression Compression) (src, out string) {
	t.Helper()
	tmp := t.TempDir()
	src, out = filepath.Join(tmp, "src"), filepath.Join(tmp, "img")
	writeFiles(t, src)
	if err := Pack(context.Background(), PackOptions{Out: out, Sources: []PackSource{{Src: src}}, Compression: compression}); err != nil {
		t.Fatal(err)
	}
	return src, out
}

// layered builds an OCI image from hand-made uncompressed layers.
func layered(t *testing.T, layers ...[]tarEntry) v1.Image {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, l := range layers {
		var err error
		img, err = mutate.AppendLayers(img, static.NewLayer(tarBytes(t, l), types.OCIUncompressedLayer))
		if err != nil {
			t.Fatal(err)
		}
	}
	return img
}

func TestEnsureOCIArchive(t *testing.T) {
	for _, c := range []Compression{CompressionGzip, CompressionNone} {
		t.Run(string(c), func(t *testing.T) {
			src, out := packed(t, c)
			archive := filepath.Join(t.TempDir(), "img.tar")
			tarDir(t, out, archive)
			cache := NewCache(t.TempDir(), nil)
			for _, ref := range []string{"oci-archive:" + archive, "oci-archive:" + archive + ":latest"} {
				img, err := cache.Ensure(context.Background(), ref)
				if err != nil {
					t.Fatal(err)
				}
				if img.Digest != layoutDigest(t, out) {
					t.Errorf("%s: digest %s, layout %s", ref, img.Digest, layoutDigest(t, out))
				}
				compareTrees(t, expectedTree(t, src, "/"), snapshot(t, img.RootFS))
			}
			if n := cache.unpacks.Load(); n != 1 {
				t.Errorf("%d unpacks for one digest, want 1", n)
			}
			_, err := cache.Ensure(context.Background(), "oci-archive:"+archive+":nope")
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("missing tag: %v, want ErrNotFound", err)
			}
		})
	}
}

func TestEnsureWhiteouts(t *testing.T) {
	lower := []tarEntry{
		{name: "a/", typ: tar.TypeDir, mode: 0o755},
		{name: "a/keep", body: "keep"},
		{name: "a/gone", body: "gone"},
		{name: "b/", typ: tar.TypeDir, mode: 0o755},
		{name: "b/x", body: "x"},
		{name: "opq/", typ: tar.TypeDir, mode: 0o755},
		{name: "opq/old", body: "old"},
		{name: "opq/sub/older", body: "older"},
		{name: "replaced", body: "lower"},
		{name: "big/", typ: tar.TypeDir, mode: 0o700},
		{name: "big/f", body: "f"},
	}
	upper := []tarEntry{
		{name: "a/.wh.gone", body: ""},
		{name: ".wh.b", body: ""},
		{name: "opq/", typ: tar.TypeDir, mode: 0o755},
		{name: "opq/.wh..wh..opq", body: ""},
		{name: "opq/new", body: "new"},
		{name: "replaced", body: "upper"},
		{name: "hl", typ: tar.TypeLink, link: "a/keep"}, // target in the lower layer
		{name: "big/g", body: "g"},                      // lower's directory entry comes later in the stream
	}
	dir := filepath.Join(t.TempDir(), "layout")
	writeLayout(t, dir, layered(t, lower, upper), "v1")
	img, err := NewCache(t.TempDir(), nil).Ensure(context.Background(), "oci:"+dir+":v1")
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"a/keep": "keep", "opq/new": "new", "replaced": "upper", "hl": "keep", "big/f": "f", "big/g": "g"} {
		if b, err := os.ReadFile(filepath.Join(img.RootFS, p)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", p, b, err, want)
		}
	}
	for _, p := range []string{"a/gone", "a/.wh.gone", "b", ".wh.b", "opq/old", "opq/sub", "opq/.wh..wh..opq"} {
		if _, err := os.Lstat(filepath.Join(img.RootFS, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v, want it whited out", p, err)
		}
	}
	var keep, hl syscall.Stat_t
	_ = syscall.Stat(filepath.Join(img.RootFS, "a/keep"), &keep)
	_ = syscall.Stat(filepath.Join(img.RootFS, "hl"), &hl)
	if keep.Ino != hl.Ino {
		t.Error("hl is not a hard link to a/keep")
	}
	if fi, err := os.Stat(filepath.Join(img.RootFS, "big")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("big: %v %v, want the lower layer's mode 0700", fi.Mode(), err)
	}
}

func TestEnsureCacheHit(t *testing.T) {
	_, out := packed(t, CompressionGzip)
	c := NewCache(t.TempDir(), nil)
	ctx := context.Background()
	first, err := c.Ensure(ctx, "oci:"+out)
	if err != nil {
		t.Fatal(err)
	}
	// A marker a re-extraction would lose, and the directory's inode.
	marker := filepath.Join(first.RootFS, "marker")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var before, after syscall.Stat_t
	_ = syscall.Stat(first.RootFS, &before)

	second, err := c.Ensure(ctx, "oci:"+out+":latest")
	if err != nil {
		t.Fatal(err)
	}
	_ = syscall.Stat(second.RootFS, &after)
	if second.RootFS != first.RootFS || before.Ino != after.Ino {
		t.Errorf("second Ensure gave %s (inode %d), first %s (inode %d)", second.RootFS, after.Ino, first.RootFS, before.Ino)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("marker gone, rootfs was re-extracted: %v", err)
	}
	// A new Cache on the same directory (another process) hits too.
	other := NewCache(c.dir, nil)
	if _, err := other.Ensure(ctx, "oci:"+out); err != nil {
		t.Fatal(err)
	}
	if n := c.unpacks.Load() + other.unpacks.Load(); n != 1 {
		t.Errorf("%d unpacks, want 1", n)
	}
}

func TestEnsureConcurrent(t *testing.T) {
	_, out := packed(t, CompressionNone)
	c := NewCache(t.TempDir(), nil)
	const callers = 8
	var wg sync.WaitGroup
	roots := make([]string, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Go(func() {
			img, err := c.Ensure(context.Background(), "oci:"+out)
			errs[i] = err
			if err == nil {
				roots[i] = img.RootFS
			}
		})
	}
	wg.Wait()
	for i := range callers {
		if errs[i] != nil || roots[i] != roots[0] {
			t.Errorf("caller %d: %s, %v; caller 0: %s", i, roots[i], errs[i], roots[0])
		}
	}
	if n := c.unpacks.Load(); n != 1 {
		t.Errorf("%d concurrent unpacks of one digest, want 1", n)
	}
	noStrayTemps(t, c.dir)
}

// A caller whose ctx has ended before an uncached image is unpacked gets
// ctx's error and starts nothing: no unpack, nothing in the cache.
func TestEnsureCanceled(t *testing.T) {
	_, out := packed(t, CompressionGzip)
	c := NewCache(t.TempDir(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Ensure(ctx, "oci:"+out); !errors.Is(err, context.Canceled) {
		t.Fatalf("Ensure with a canceled context = %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(c.dir, "rootfs")); len(ents) != 0 {
		t.Errorf("rootfs dir holds %v", ents)
	}
	if _, err := c.Ensure(context.Background(), "oci:"+out); err != nil {
		t.Errorf("Ensure after a canceled one: %v", err)
	}
	if n := c.unpacks.Load(); n != 1 {
		t.Errorf("%d unpacks, want 1 (the second call's)", n)
	}
}

func TestEnsureSelect(t *testing.T) {
	a := layered(t, []tarEntry{{name: "which", body: "a"}})
	b := layered(t, []tarEntry{{name: "which", body: "b"}})
	tmp := t.TempDir()
	two := filepath.Join(tmp, "two")
	writeLayout(t, two, a, "a")
	lp, err := layout.FromPath(two)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(b, layout.WithAnnotations(map[string]string{annotationRefName: "b"})); err != nil {
		t.Fatal(err)
	}
	untagged := filepath.Join(tmp, "untagged")
	writeLayout(t, untagged, b, "")
	emptyLayout := filepath.Join(tmp, "empty")
	writeLayout(t, emptyLayout, a)

	// A multi-platform index: this host's platform must be chosen.
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: a, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: other}}},
		mutate.IndexAddendum{Add: b, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}},
	)
	multi := filepath.Join(tmp, "multi")
	mp, err := layout.Write(multi, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := mp.AppendIndex(idx, layout.WithAnnotations(map[string]string{annotationRefName: "latest"})); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		ref     string
		want    string // content of /which, or "" for an error
		wantErr error
	}{
		{ref: "oci:" + two + ":a", want: "a"},
		{ref: "oci:" + two + ":b", want: "b"},
		{ref: "oci:" + two, wantErr: ErrAmbiguous},
		{ref: "oci:" + two + ":c", wantErr: ErrNotFound},
		{ref: "oci:" + untagged, want: "b"},
		{ref: "oci:" + emptyLayout, wantErr: ErrNotFound},
		{ref: "oci:" + multi, want: "b"},
		{ref: "oci:" + filepath.Join(tmp, "missing"), wantErr: os.ErrNotExist},
		{ref: "oci-archive:" + filepath.Join(tmp, "missing.tar"), wantErr: os.ErrNotExist},
		{ref: "oci:", wantErr: ErrBadRef},
	}
	c := NewCache(t.TempDir(), nil)
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			img, err := c.Ensure(context.Background(), tt.ref)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Ensure = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(img.RootFS, "which")); err != nil || string(b) != tt.want {
				t.Errorf("which = %q, %v; want %q", b, err, tt.want)
			}
		})
	}
}

func TestEnsurePathTraversal(t *testing.T) {
	tmp := t.TempDir()
	cacheDir := filepath.Join(tmp, "cache")
	outside := filepath.Join(tmp, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		layers  [][]tarEntry
		wantErr bool
		link    os.FileMode // type of /link in the rootfs when no error
	}{
		{name: "dotdot name", layers: [][]tarEntry{{{name: "ok", body: "x"}, {name: "../evil", body: "x"}}}, wantErr: true},
		{name: "deep dotdot name", layers: [][]tarEntry{{{name: "a/../../../evil", body: "x"}}}, wantErr: true},
		// A symlink to a host directory in a lower layer, then a write
		// "through" it in an upper layer: the flattened upper entry wins
		// and lands inside the rootfs; nothing reaches the host directory.
		{name: "write through symlink", layers: [][]tarEntry{
			{{name: "link", typ: tar.TypeSymlink, link: outside}},
			{{name: "link/evil", body: "x"}},
		}, link: os.ModeDir},
		// In one layer the symlink hides what is "under" it.
		{name: "symlink then write in one layer", layers: [][]tarEntry{{
			{name: "link", typ: tar.TypeSymlink, link: outside},
			{name: "link/evil", body: "x"},
		}}, link: os.ModeSymlink},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(tmp, "layout-"+tt.name)
			layers := layered(t, tt.layers...)
			writeLayout(t, dir, layers, "latest")
			digest, err := layers.Digest()
			if err != nil {
				t.Fatal(err)
			}
			img, err := NewCache(cacheDir, nil).Ensure(context.Background(), "oci:"+dir)
			if tt.wantErr == (err == nil) {
				t.Fatalf("Ensure = %v, want error %v", err, tt.wantErr)
			}
			for _, p := range []string{filepath.Join(cacheDir, "evil"), filepath.Join(cacheDir, "rootfs", "evil"), filepath.Join(outside, "evil"), filepath.Join(tmp, "evil")} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s was written outside the rootfs", p)
				}
			}
			if err == nil {
				if fi, err := os.Lstat(filepath.Join(img.RootFS, "link")); err != nil || fi.Mode().Type() != tt.link {
					t.Errorf("link: %v, %v; want type %v", fi.Mode(), err, tt.link)
				}
			} else if _, err := os.Lstat(filepath.Join(cacheDir, "rootfs", digest.Hex)); err == nil {
				t.Error("a refused image was left in the cache")
			}
			noStrayTemps(t, cacheDir)
		})
	}
}

func TestExtractUnsafe(t *testing.T) {
	tests := []struct {
		name    string
		entries []tarEntry
	}{
		{"dotdot", []tarEntry{{name: "../evil", body: "x"}}},
		{"nested dotdot", []tarEntry{{name: "a/b/../../../evil", body: "x"}}},
		{"symlinked parent", []tarEntry{{name: "s", typ: tar.TypeSymlink, link: "/"}, {name: "s/evil", body: "x"}}},
		{"relative symlinked parent", []tarEntry{{name: "s", typ: tar.TypeSymlink, link: "../.."}, {name: "s/evil", body: "x"}}},
		{"hard link out", []tarEntry{{name: "l", typ: tar.TypeLink, link: "../../etc/passwd"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := t.TempDir()
			root := filepath.Join(parent, "a", "b", "root")
			if err := os.MkdirAll(root, 0o755); err != nil {
				t.Fatal(err)
			}
			_, err := extractTar(context.Background(), bytes.NewReader(tarBytes(t, tt.entries)), root, discard)
			if !errors.Is(err, ErrUnsafePath) {
				t.Fatalf("extractTar = %v, want ErrUnsafePath", err)
			}
			for _, p := range []string{filepath.Join(parent, "evil"), filepath.Join(parent, "a", "evil"), filepath.Join(parent, "a", "b", "evil"), "/evil"} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s written outside the root", p)
				}
			}
		})
	}
}

func TestExtractSkipsDevicesKeepsNames(t *testing.T) {
	root := t.TempDir()
	st, err := extractTar(context.Background(), bytes.NewReader(tarBytes(t, []tarEntry{
		{name: "./dot/slash", body: "1"},
		{name: "/abs/name", body: "2"},
		{name: "dev/null", typ: tar.TypeChar},
		{name: "fifo", typ: tar.TypeFifo},
	})), root, discard)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"dot/slash": "1", "abs/name": "2"} {
		if b, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v", p, b, err)
		}
	}
	if st.skipped != 2 {
		t.Errorf("skipped %d entries, want 2 (char device, FIFO)", st.skipped)
	}
}

// A layer that cannot be read must fail the unpack, not leave a rootfs
// holding only the layers read so far (mutate.Extract ends its tar cleanly
// before reporting the error; extractTar must still see it).
func TestEnsureMissingLayerFails(t *testing.T) {
	img := layered(t, []tarEntry{{name: "lower", body: "1"}}, []tarEntry{{name: "upper", body: "2"}})
	dir := filepath.Join(t.TempDir(), "layout")
	writeLayout(t, dir, img, "latest")
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	// Layers are extracted top-down, so drop the bottom one: the top one
	// has been written by the time the error happens.
	lower, err := layers[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "blobs", "sha256", lower.Hex)); err != nil {
		t.Fatal(err)
	}
	c := NewCache(t.TempDir(), nil)
	if _, err := c.Ensure(context.Background(), "oci:"+dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Ensure = %v, want the missing blob's error", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(c.dir, "rootfs")); len(ents) != 0 {
		t.Errorf("failed unpack left %v", ents)
	}
}

// stallImage is an image whose layers cannot be read until release is
// closed, and then fail with os.ErrClosed if the image's closer has been
// called, as a closed archive file would.
type stallImage struct {
	v1.Image
	stall  *stall
	closed chan struct{}
	inner  io.Closer // what resolve opened
}

// stall is shared by every stallImage a test opens.
type stall struct {
	once    sync.Once
	started chan struct{} // closed once a layer is first read
	release chan struct{}
}

func (s *stallImage) Close() error {
	close(s.closed)
	return s.inner.Close()
}

func (s *stallImage) Layers() ([]v1.Layer, error) {
	ls, err := s.Image.Layers()
	for i := range ls {
		ls[i] = stallLayer{ls[i], s}
	}
	return ls, err
}

type stallLayer struct {
	v1.Layer
	s *stallImage
}

func (l stallLayer) Uncompressed() (io.ReadCloser, error) {
	l.s.stall.once.Do(func() { close(l.s.stall.started) })
	<-l.s.stall.release
	select {
	case <-l.s.closed:
		return nil, os.ErrClosed
	default:
	}
	return l.Layer.Uncompressed()
}

// The shared unpack is detached from its callers: when the caller that
// started it goes away, it stops waiting with its ctx's error, the unpack
// goes on (reading an image it opened itself, not the caller's, whose files
// are closed by then), and a caller that joined it gets the image from that
// one unpack.
func TestEnsureSharedUnpackOutlivesCaller(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "layout")
	writeLayout(t, dir, layered(t, []tarEntry{{name: "f", body: "x"}}), "latest")
	ref := "oci:" + dir
	c := NewCache(t.TempDir(), nil)
	st := &stall{started: make(chan struct{}), release: make(chan struct{})}
	c.resolve = func(ctx context.Context, r Ref, _ authn.Keychain) (v1.Image, io.Closer, error) {
		img, closer, err := resolve(ctx, r, localRoots{}, nil)
		if err != nil {
			return nil, nil, err
		}
		s := &stallImage{Image: img, stall: st, closed: make(chan struct{}), inner: closer}
		return s, s, nil
	}

	firstCtx, cancelFirst := context.WithCancel(context.Background())
	defer cancelFirst()
	first := make(chan error, 1)
	go func() {
		_, err := c.Ensure(firstCtx, ref)
		first <- err
	}()
	<-st.started // the shared unpack is reading layers
	type result struct {
		img *Image
		err error
	}
	second := make(chan result, 1)
	go func() {
		img, err := c.Ensure(context.Background(), ref)
		second <- result{img, err}
	}()
	testwait.Until(t, "the second caller to join the unpack", func() bool { return c.flight.Waiting() == 2 })

	cancelFirst()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Errorf("first caller: %v, want context.Canceled", err)
	}
	if w := c.flight.Waiting(); w != 1 {
		t.Errorf("%d callers waiting after the first left, want 1", w)
	}
	select {
	case r := <-second:
		t.Fatalf("second caller returned before the unpack finished: %v", r.err)
	default:
	}
	close(st.release)
	r := <-second
	if r.err != nil {
		t.Fatalf("second caller: %v", r.err)
	}
	if b, err := os.ReadFile(filepath.Join(r.img.RootFS, "f")); err != nil || string(b) != "x" {
		t.Errorf("f = %q, %v", b, err)
	}
	if n := c.unpacks.Load(); n != 1 {
		t.Errorf("%d unpacks, want 1 (shared, not restarted)", n)
	}
	noStrayTemps(t, c.dir)
}
