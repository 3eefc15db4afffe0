package image

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// IndexOptions describes the multi-platform layout PackIndex writes.
type IndexOptions struct {
	// Out is the OCI image layout directory to write, replaced as Pack
	// replaces its Out.
	Out string
	// Tag is the org.opencontainers.image.ref.name of the index in Out's
	// index.json; default "latest".
	Tag string
	// Layouts are OCI layouts holding one image each (as Pack writes
	// them), one per platform, listed in the index in this order. Each
	// image's platform is read from its config (os, architecture,
	// variant); two images of one platform are refused.
	Layouts []string
	// Logger receives progress; nil discards.
	Logger *slog.Logger
}

// PackIndex writes one OCI image layout at o.Out whose index.json names,
// under o.Tag, an image index (an OCI "manifest list") of the images in
// o.Layouts, each with its platform: what a registry serves as one
// multi-architecture image, and what "oci:<Out>" resolves for the host's
// platform.
//
// Deterministic like Pack: the index holds only the manifests'
// descriptors with their platforms, in the given order, so the same
// input layouts give the same index digest.
func PackIndex(ctx context.Context, o IndexOptions) error {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Tag == "" {
		o.Tag = "latest"
	}
	if o.Out == "" {
		return errors.New("pack index: no output directory")
	}
	if len(o.Layouts) == 0 {
		return errors.New("pack index: no input layouts")
	}
	start := time.Now()
	o.Out = filepath.Clean(o.Out)
	if o.Out == "/" {
		return errors.New("pack index: refusing to replace /")
	}

	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	seen := map[string]string{}
	for _, dir := range o.Layouts {
		if err := ctx.Err(); err != nil {
			return err
		}
		if filepath.Clean(dir) == o.Out {
			return fmt.Errorf("pack index: input %s is also the output", dir)
		}
		img, p, err := singleImage(dir)
		if err != nil {
			return err
		}
		if other, dup := seen[p.String()]; dup {
			return fmt.Errorf("pack index: %s and %s are both %s", other, dir, p)
		}
		seen[p.String()] = dir
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: p},
		})
	}

	tmp, err := stagingDir(o.Out, "pack index")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // after a successful rename there is nothing left
	lp, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return fmt.Errorf("pack index: write layout: %w", err)
	}
	// AppendIndex writes every child manifest, config and layer blob too.
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{annotationRefName: o.Tag})); err != nil {
		return fmt.Errorf("pack index: write layout: %w", err)
	}
	if err := replaceDir(tmp, o.Out); err != nil {
		return err
	}
	digest, _ := idx.Digest()
	o.Logger.Info("packed index", "out", o.Out, "tag", o.Tag, "digest", digest.String(),
		"platforms", len(o.Layouts), "duration", time.Since(start).Round(time.Millisecond))
	return nil
}

// singleImage opens the only manifest of the layout at dir, which must be
// an image (not an index), and returns it with its platform.
func singleImage(dir string) (v1.Image, *v1.Platform, error) {
	ii, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("pack index: open layout %s: %w", dir, err)
	}
	im, err := ii.IndexManifest()
	if err != nil {
		return nil, nil, fmt.Errorf("pack index: read %s/index.json: %w", dir, err)
	}
	if len(im.Manifests) != 1 {
		return nil, nil, fmt.Errorf("pack index: %s holds %d manifests, want one image", dir, len(im.Manifests))
	}
	desc := im.Manifests[0]
	if !desc.MediaType.IsImage() {
		return nil, nil, fmt.Errorf("pack index: %s holds a %s, want one image", dir, desc.MediaType)
	}
	img, err := ii.Image(desc.Digest)
	if err != nil {
		return nil, nil, fmt.Errorf("pack index: open image in %s: %w", dir, err)
	}
	// The index lists the image by media type, digest and size (plus the
	// platform): not the input layout's own ref.name annotation, which a
	// layout image would otherwise carry into its descriptor.
	img = describedImage{Image: img, desc: v1.Descriptor{MediaType: desc.MediaType, Size: desc.Size, Digest: desc.Digest}}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, nil, fmt.Errorf("pack index: read config of %s: %w", dir, err)
	}
	if cf.OS == "" || cf.Architecture == "" {
		return nil, nil, fmt.Errorf("pack index: %s: image config names no os/architecture", dir)
	}
	return img, &v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant, OSVersion: cf.OSVersion}, nil
}

// describedImage is an image whose index descriptor is exactly desc.
type describedImage struct {
	v1.Image
	desc v1.Descriptor
}

// Descriptor is what mutate.AppendManifests lists for the image.
func (d describedImage) Descriptor() (*v1.Descriptor, error) {
	desc := d.desc
	return &desc, nil
}
