package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// archive is an OCI image layout read in place from a tar file
// (oci-archive:). Opening it reads only the tar headers (seeking over the
// data), so resolving a cached image's digest costs a header scan, not a
// copy of the blobs; blobs are later read as sections of the file. It is
// safe for concurrent use (reads use ReadAt) until Close.
type archive struct {
	path  string
	f     *os.File
	files map[string]section // cleaned member name → data
}

// section is where a regular member's data sits in the archive file.
type section struct{ off, size int64 }

// maxMetaBlob bounds manifests, indexes and configs read into memory, so a
// corrupt archive cannot make us allocate gigabytes. Real ones are a few KB.
const maxMetaBlob = 16 << 20

var _ io.Closer = (*archive)(nil)

// openArchive indexes the members of the tar file f, named p in messages,
// and takes f over: Close closes it, as does a failure.
func openArchive(f *os.File, p string) (*archive, error) {
	a := &archive{path: p, f: f, files: map[string]section{}}
	// tar.Reader does not read ahead and skips data by seeking when it can,
	// so after Next the file offset is exactly where the member's data
	// starts.
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("read oci archive %s: %w", p, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		off, err := f.Seek(0, io.SeekCurrent)
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("read oci archive %s: %w", p, err)
		}
		a.files[strings.TrimPrefix(path.Clean(h.Name), "/")] = section{off: off, size: h.Size}
	}
	return a, nil
}

// Close releases the archive file; images read from it fail afterwards.
func (a *archive) Close() error { return a.f.Close() }

// open returns a reader over member name and its size.
func (a *archive) open(name string) (io.ReadCloser, int64, error) {
	s, ok := a.files[name]
	if !ok {
		return nil, 0, fmt.Errorf("%w: oci archive %s has no %s", ErrNotFound, a.path, name)
	}
	return io.NopCloser(io.NewSectionReader(a.f, s.off, s.size)), s.size, nil
}

func (a *archive) String() string { return "oci archive " + a.path }

// layoutSource is where an OCI image layout's files are read from: the
// members of an archive, or the files of a layout directory under an image
// root (dirLayout).
type layoutSource interface {
	// open returns a reader over the layout file name ("index.json",
	// "blobs/sha256/<hex>") and its size.
	open(name string) (io.ReadCloser, int64, error)
	// String names the layout in error messages.
	String() string
}

var _ layoutSource = (*archive)(nil)

// readMeta reads a small layout file (index.json, a manifest or a config)
// into memory.
func readMeta(src layoutSource, name string) ([]byte, error) {
	r, size, err := src.open(name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if size > maxMetaBlob {
		return nil, fmt.Errorf("%s: %s is %d bytes, more than the %d allowed for metadata", src, name, size, maxMetaBlob)
	}
	b, err := io.ReadAll(io.LimitReader(r, maxMetaBlob+1))
	if err != nil {
		return nil, fmt.Errorf("read %s from %s: %w", name, src, err)
	}
	if len(b) > maxMetaBlob {
		return nil, fmt.Errorf("%s: %s is more than the %d bytes allowed for metadata", src, name, maxMetaBlob)
	}
	return b, nil
}

func blobName(h v1.Hash) string { return path.Join("blobs", h.Algorithm, h.Hex) }

func readBlob(src layoutSource, h v1.Hash) ([]byte, error) {
	return readMeta(src, blobName(h))
}

// layoutIndex returns a layout's top-level index (index.json).
func layoutIndex(src layoutSource) (v1.ImageIndex, error) {
	raw, err := readMeta(src, "index.json")
	if err != nil {
		return nil, err
	}
	return &archiveIndex{a: src, raw: raw}, nil
}

// archiveIndex is an image index stored in a layout source.
type archiveIndex struct {
	a   layoutSource
	raw []byte
}

var _ v1.ImageIndex = (*archiveIndex)(nil)

func (x *archiveIndex) MediaType() (types.MediaType, error) {
	im, err := x.IndexManifest()
	if err != nil {
		return "", err
	}
	if im.MediaType == "" {
		return types.OCIImageIndex, nil
	}
	return im.MediaType, nil
}

func (x *archiveIndex) Digest() (v1.Hash, error) {
	h, _, err := v1.SHA256(bytes.NewReader(x.raw))
	return h, err
}

func (x *archiveIndex) Size() (int64, error) { return int64(len(x.raw)), nil }

func (x *archiveIndex) IndexManifest() (*v1.IndexManifest, error) {
	return v1.ParseIndexManifest(bytes.NewReader(x.raw))
}

func (x *archiveIndex) RawManifest() ([]byte, error) { return x.raw, nil }

func (x *archiveIndex) Image(h v1.Hash) (v1.Image, error) {
	raw, err := readBlob(x.a, h)
	if err != nil {
		return nil, err
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parse manifest %s in %s: %w", h, x.a, err)
	}
	return partial.CompressedToImage(&archiveImage{a: x.a, raw: raw, manifest: m})
}

func (x *archiveIndex) ImageIndex(h v1.Hash) (v1.ImageIndex, error) {
	raw, err := readBlob(x.a, h)
	if err != nil {
		return nil, err
	}
	return &archiveIndex{a: x.a, raw: raw}, nil
}

// archiveImage is the minimal core of an image stored in an archive;
// partial.CompressedToImage derives the rest of v1.Image from it.
type archiveImage struct {
	a        layoutSource
	raw      []byte
	manifest *v1.Manifest
}

var _ partial.CompressedImageCore = (*archiveImage)(nil)

func (i *archiveImage) RawConfigFile() ([]byte, error) {
	return readBlob(i.a, i.manifest.Config.Digest)
}

func (i *archiveImage) MediaType() (types.MediaType, error) {
	if i.manifest.MediaType == "" {
		return types.OCIManifestSchema1, nil
	}
	return i.manifest.MediaType, nil
}

func (i *archiveImage) RawManifest() ([]byte, error) { return i.raw, nil }

func (i *archiveImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if h == i.manifest.Config.Digest {
		return &archiveBlob{a: i.a, desc: i.manifest.Config}, nil
	}
	for _, d := range i.manifest.Layers {
		if d.Digest == h {
			return &archiveBlob{a: i.a, desc: d}, nil
		}
	}
	return nil, fmt.Errorf("%w: blob %s is not in manifest", ErrNotFound, h)
}

// archiveBlob is a layer (or config) blob stored in an archive. Compressed
// returns the blob as stored; partial sniffs whether it is gzip, zstd or a
// plain tar when uncompressing.
type archiveBlob struct {
	a    layoutSource
	desc v1.Descriptor
}

var _ partial.CompressedLayer = (*archiveBlob)(nil)

func (b *archiveBlob) Digest() (v1.Hash, error) { return b.desc.Digest, nil }

func (b *archiveBlob) Compressed() (io.ReadCloser, error) {
	r, _, err := b.a.open(blobName(b.desc.Digest))
	return r, err
}

func (b *archiveBlob) Size() (int64, error) { return b.desc.Size, nil }

func (b *archiveBlob) MediaType() (types.MediaType, error) { return b.desc.MediaType, nil }
