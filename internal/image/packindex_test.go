package image

import (
	"context"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// otherArch is an architecture that is not this host's.
func otherArch() string {
	if runtime.GOARCH == "arm64" {
		return "amd64"
	}
	return "arm64"
}

// packArch packs src as a single-image layout for arch at dir.
func packArch(t *testing.T, src, dir, arch string) {
	t.Helper()
	err := Pack(context.Background(), PackOptions{
		Out: dir, Sources: []PackSource{{Src: src}}, Entrypoint: []string{"/bin/tool"},
		Architecture: arch, Tag: "single",
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestPackIndex(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	src := filepath.Join(tmp, "src")
	writeFiles(t, src)
	host, other := filepath.Join(tmp, "host"), filepath.Join(tmp, "other")
	packArch(t, src, host, runtime.GOARCH)
	packArch(t, src, other, otherArch())

	out := filepath.Join(tmp, "multi")
	if err := PackIndex(ctx, IndexOptions{Out: out, Tag: "v1", Layouts: []string{host, other}}); err != nil {
		t.Fatal(err)
	}
	ii, err := layout.ImageIndexFromPath(out)
	if err != nil {
		t.Fatal(err)
	}
	top, err := ii.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Manifests) != 1 || top.Manifests[0].MediaType != types.OCIImageIndex || top.Manifests[0].Annotations[annotationRefName] != "v1" {
		t.Fatalf("index.json: %+v, want one OCI image index tagged v1", top.Manifests)
	}
	child, err := ii.ImageIndex(top.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := child.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	wantArch := []string{runtime.GOARCH, otherArch()}
	wantDigest := []string{layoutDigest(t, host), layoutDigest(t, other)}
	if len(im.Manifests) != 2 {
		t.Fatalf("index lists %d manifests, want 2", len(im.Manifests))
	}
	for i, d := range im.Manifests {
		if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != wantArch[i] {
			t.Errorf("manifest %d: platform %+v, want linux/%s", i, d.Platform, wantArch[i])
		}
		if d.Digest.String() != wantDigest[i] || d.MediaType != types.OCIManifestSchema1 {
			t.Errorf("manifest %d: %s %s, want %s of the input layout", i, d.MediaType, d.Digest, wantDigest[i])
		}
		if len(d.Annotations) != 0 || d.ArtifactType != "" {
			t.Errorf("manifest %d: annotations %v artifactType %q, want none (not the input's ref.name)", i, d.Annotations, d.ArtifactType)
		}
	}

	// Same inputs, same digest; the layout is replaced in place.
	first := top.Manifests[0].Digest
	if err := PackIndex(ctx, IndexOptions{Out: out, Tag: "v1", Layouts: []string{host, other}}); err != nil {
		t.Fatal(err)
	}
	if again := indexDigest(t, out); again != first.String() {
		t.Errorf("repacked index digest %s, first %s", again, first)
	}

	// ate resolves the layout, by tag or alone, to this host's image.
	c := NewCache(filepath.Join(tmp, "cache"), nil)
	for _, ref := range []string{"oci:" + out, "oci:" + out + ":v1"} {
		img, err := c.Ensure(ctx, ref)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		if img.Digest != wantDigest[0] {
			t.Errorf("%s resolved to %s, want this host's image %s", ref, img.Digest, wantDigest[0])
		}
	}
}

// indexDigest returns the digest of the only entry of dir's index.json.
func indexDigest(t *testing.T, dir string) string {
	t.Helper()
	ii, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := ii.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("%s: %d manifests, want 1", dir, len(im.Manifests))
	}
	return im.Manifests[0].Digest.String()
}

func TestPackIndexErrors(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	src := filepath.Join(tmp, "src")
	writeFiles(t, src)
	a, b := filepath.Join(tmp, "a"), filepath.Join(tmp, "b")
	packArch(t, src, a, "amd64")
	packArch(t, src, b, "amd64")
	multi := filepath.Join(tmp, "multi")
	packArch(t, src, filepath.Join(tmp, "arm"), "arm64")
	if err := PackIndex(ctx, IndexOptions{Out: multi, Layouts: []string{a, filepath.Join(tmp, "arm")}}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		o    IndexOptions
		want string
	}{
		{"no inputs", IndexOptions{Out: filepath.Join(tmp, "x")}, "no input layouts"},
		{"no output", IndexOptions{Layouts: []string{a}}, "no output directory"},
		{"same platform twice", IndexOptions{Out: filepath.Join(tmp, "x"), Layouts: []string{a, b}}, "are both linux/amd64"},
		{"an index as input", IndexOptions{Out: filepath.Join(tmp, "x"), Layouts: []string{multi}}, "want one image"},
		{"input is output", IndexOptions{Out: a, Layouts: []string{a}}, "also the output"},
		{"not a layout", IndexOptions{Out: filepath.Join(tmp, "x"), Layouts: []string{src}}, "open layout"},
		{"output not a layout", IndexOptions{Out: src, Layouts: []string{a}}, "not an OCI layout"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := PackIndex(ctx, tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
