package image

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Compression is how Pack stores its layer.
type Compression string

const (
	// CompressionGzip stores the layer as application/vnd.oci.image.layer.v1.tar+gzip.
	CompressionGzip Compression = "gzip"
	// CompressionNone stores it as a plain application/vnd.oci.image.layer.v1.tar:
	// for large local images where gzip costs more time than the disk it
	// saves (the Python example's rootfs packs an order of magnitude
	// faster uncompressed; hack/build-examples.sh logs each pack's time).
	CompressionNone Compression = "none"
)

// PackSource is one input of Pack.
type PackSource struct {
	// Src is a host directory or file. A symlink is followed.
	Src string
	// Dest is where Src lands in the image: a directory's contents go
	// under Dest ("/" or "" for the image root), a file becomes Dest
	// (which must then name the file, e.g. "/app/notes.py").
	Dest string
}

// PackOptions describes the image Pack builds.
type PackOptions struct {
	// Out is the OCI image layout directory to write. An existing Out is
	// replaced if it is an OCI layout or empty; anything else is refused.
	Out string
	// Tag is written as the org.opencontainers.image.ref.name annotation;
	// default "latest".
	Tag string
	// Sources are layered into one filesystem in order; on a path both
	// give, the later source wins. At least one is required.
	Sources []PackSource
	// Entrypoint, Cmd, Env (KEY=VALUE), WorkingDir and ExposedPorts (TCP
	// port numbers) go into the image configuration.
	Entrypoint   []string
	Cmd          []string
	Env          []string
	WorkingDir   string
	ExposedPorts []int
	// Compression defaults to CompressionGzip.
	Compression Compression
	// KeepMTimes stores the sources' modification times (whole seconds)
	// instead of a fixed epoch. The digest then changes whenever a source
	// file is rewritten, even with the same bytes; use it for inputs that
	// are built once, such as a Python rootfs, whose timestamp-validated
	// .pyc files would otherwise all look stale and be recompiled on
	// every cold start.
	KeepMTimes bool
	// Architecture is the image's GOARCH-style architecture; default
	// runtime.GOARCH. The OS is always linux.
	Architecture string
	// Logger receives progress; nil discards.
	Logger *slog.Logger
}

// packEpoch is the time stamped on every entry and on the image config
// unless KeepMTimes: a constant, so equal inputs give equal digests.
var packEpoch = time.Unix(0, 0).UTC()

// Pack builds a single-layer OCI image from host files and writes it as an
// OCI image layout at o.Out, so that "oci:<Out>" and "oci:<Out>:<Tag>"
// resolve to it.
//
// The layer is deterministic: entries sorted by path, uid/gid 0, no user or
// group names, and fixed times unless o.KeepMTimes; packing the same input
// twice yields the same manifest digest. Hard links within the input are
// kept as hard links; device nodes, FIFOs and sockets are skipped (the
// sandbox provides /dev). Extended attributes are not stored.
func Pack(ctx context.Context, o PackOptions) error {
	if err := o.defaults(); err != nil {
		return err
	}
	start := time.Now()
	o.Out = filepath.Clean(o.Out)
	tmp, err := stagingDir(o.Out, "pack")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // after a successful rename there is nothing left

	entries, err := collect(ctx, o)
	if err != nil {
		return err
	}
	layer, err := writeLayer(ctx, entries, filepath.Join(tmp, "blobs", "sha256"), o.Compression, o.KeepMTimes)
	if err != nil {
		return err
	}
	img, err := buildImage(layer, o)
	if err != nil {
		return err
	}
	lp, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return fmt.Errorf("pack: write layout: %w", err)
	}
	// The layer blob already sits at its final name, so AppendImage skips
	// rewriting it and only adds the config, manifest and index entry.
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{annotationRefName: o.Tag})); err != nil {
		return fmt.Errorf("pack: write layout: %w", err)
	}
	if err := replaceDir(tmp, o.Out); err != nil {
		return err
	}
	digest, _ := img.Digest()
	o.Logger.Info("packed image", "out", o.Out, "tag", o.Tag, "digest", digest.String(),
		"entries", len(entries), "layer_bytes", layer.size, "compression", string(o.Compression),
		"duration", time.Since(start).Round(time.Millisecond))
	return nil
}

// defaults fills in defaults and validates o.
func (o *PackOptions) defaults() error {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Tag == "" {
		o.Tag = "latest"
	}
	if o.Compression == "" {
		o.Compression = CompressionGzip
	}
	if o.Architecture == "" {
		o.Architecture = runtime.GOARCH
	}
	switch {
	case o.Out == "":
		return errors.New("pack: no output directory")
	case filepath.Clean(o.Out) == "/":
		return errors.New("pack: refusing to replace /")
	case len(o.Sources) == 0:
		return errors.New("pack: no sources")
	case o.Compression != CompressionGzip && o.Compression != CompressionNone:
		return fmt.Errorf("pack: compression %q: want %q or %q", o.Compression, CompressionGzip, CompressionNone)
	}
	for _, s := range o.Sources {
		if s.Src == "" {
			return fmt.Errorf("pack: source with empty path (dest %q)", s.Dest)
		}
	}
	for _, e := range o.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("pack: env %q: want KEY=VALUE", e)
		}
	}
	for _, p := range o.ExposedPorts {
		if p < 1 || p > 65535 {
			return fmt.Errorf("pack: port %d out of range 1-65535", p)
		}
	}
	return nil
}

// buildImage wraps the layer in an OCI manifest and config.
func buildImage(layer *fileLayer, o PackOptions) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: packEpoch}, CreatedBy: "ate image pack"},
	})
	if err != nil {
		return nil, fmt.Errorf("pack: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("pack: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: packEpoch}
	cf.OS = "linux"
	cf.Architecture = o.Architecture
	cf.Config = v1.Config{
		Entrypoint: o.Entrypoint,
		Cmd:        o.Cmd,
		Env:        o.Env,
		WorkingDir: o.WorkingDir,
	}
	if len(o.ExposedPorts) > 0 {
		cf.Config.ExposedPorts = map[string]struct{}{}
		for _, p := range o.ExposedPorts {
			cf.Config.ExposedPorts[strconv.Itoa(p)+"/tcp"] = struct{}{}
		}
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("pack: %w", err)
	}
	return img, nil
}

// checkReplaceable refuses to let Pack delete anything but an earlier
// layout (or an empty directory): a mistyped --out must not wipe a tree.
func checkReplaceable(out string) error {
	fi, err := os.Stat(out)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pack: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("pack: refusing to replace %s: not a directory", out)
	}
	if _, err := os.Stat(filepath.Join(out, "oci-layout")); err == nil {
		return nil
	}
	ents, err := os.ReadDir(out)
	if err != nil {
		return fmt.Errorf("pack: %w", err)
	}
	if len(ents) > 0 {
		return fmt.Errorf("pack: refusing to replace %s: not an OCI layout", out)
	}
	return nil
}

// replaceDir moves the finished layout tmp to out, replacing an old one.
// Readers running at the same moment may find out missing briefly.
func replaceDir(tmp, out string) error {
	old := ""
	if _, err := os.Lstat(out); err == nil {
		old = tmp + ".old"
		if err := os.Rename(out, old); err != nil {
			return fmt.Errorf("pack: replace %s: %w", out, err)
		}
	}
	if err := os.Rename(tmp, out); err != nil {
		if old != "" {
			_ = os.Rename(old, out)
		}
		return fmt.Errorf("pack: replace %s: %w", out, err)
	}
	if old != "" {
		if err := os.RemoveAll(old); err != nil {
			return fmt.Errorf("pack: remove old %s: %w", out, err)
		}
	}
	return nil
}

// destName turns a PackSource.Dest into a tar name relative to the image
// root ("" for the root itself).
func destName(dest string) string {
	return strings.TrimPrefix(path.Clean("/"+filepath.ToSlash(dest)), "/")
}

// stagingDir makes the directory a layout is written into before it is
// renamed to out: beside out (so the rename stays on one filesystem),
// world-readable as a layout is, after checking that out may be replaced.
// op prefixes errors. The caller removes it.
func stagingDir(out, op string) (string, error) {
	parent := filepath.Dir(out)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("%s: %w", op, err)
	}
	if err := checkReplaceable(out); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(out)+".tmp-")
	if err != nil {
		return "", fmt.Errorf("%s: %w", op, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("%s: %w", op, err)
	}
	return tmp, nil
}
