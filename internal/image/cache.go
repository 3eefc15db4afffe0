package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"substrate.dev/ate/internal/coalesce"
)

// unpackTimeout bounds one shared unpack, which runs detached from its
// callers' cancellation (see Ensure). It is generous — a multi-gigabyte
// image pulled from a slow registry must still fit — and only keeps an
// unpack stuck on a hung read from running forever.
const unpackTimeout = 30 * time.Minute

// Image is an image whose root filesystem is unpacked on local disk.
type Image struct {
	// Digest is the image manifest's digest, "sha256:<64 hex>". For a
	// multi-platform reference it is the linux/GOARCH manifest's digest.
	Digest string
	// RootFS is the absolute path of the unpacked, flattened root
	// filesystem. It is shared by every user of the image and must be
	// treated as read-only; it lives as long as the cache directory.
	RootFS string
	// Config is the runtime part of the image configuration.
	Config Config
}

// Config is what an image says about how to run it.
type Config struct {
	Entrypoint []string
	Cmd        []string
	// Env is KEY=VALUE, in image order.
	Env        []string
	WorkingDir string
	// ExposedPorts are the TCP ports of the image's ExposedPorts ("8080/tcp"
	// or "8080"), ascending. UDP and SCTP ports are left out: actors are
	// reached through TCP only.
	ExposedPorts []int
}

// Cache unpacks images into a directory, one root filesystem per manifest
// digest:
//
//	<dir>/rootfs/<manifest digest hex>/   complete, never modified again
//	<dir>/rootfs/.unpack-<hex>-<random>/  in progress (removed on failure)
//
// A root filesystem appears under its final name only once complete (it is
// renamed into place), so its presence is the cache-hit test, also for other
// processes sharing dir. Temporary directories left by a crash are not
// reclaimed. A Cache is safe for concurrent use.
type Cache struct {
	dir    string
	logger *slog.Logger
	// flight coalesces concurrent unpacks of one digest (keyed by hex);
	// its Timeout is unpackTimeout.
	flight coalesce.Group
	// resolve opens an image; the package's resolve over roots except in
	// tests.
	resolve func(context.Context, Ref, authn.Keychain) (v1.Image, io.Closer, error)
	// creds chooses each atespace's registry credentials
	// (RegistryCredentials); anonymous by default.
	creds Credentials
	// roots bounds local image paths (LocalRoots).
	roots localRoots
	// hits maps a manifest digest to its *Image once seen complete.
	hits sync.Map
	// unpacks counts extractions started, so tests can tell a cache hit
	// from a re-extraction.
	unpacks atomic.Int64
}

// NewCache returns a cache rooted at dir, which is created on first use. A
// nil logger discards logs.
func NewCache(dir string, logger *slog.Logger, opts ...Option) *Cache {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &Cache{dir: dir, logger: logger, flight: coalesce.Group{Timeout: unpackTimeout}, creds: anonymous{}}
	for _, o := range opts {
		o(c)
	}
	c.resolve = func(ctx context.Context, r Ref, auth authn.Keychain) (v1.Image, io.Closer, error) {
		return resolve(ctx, r, c.roots, auth)
	}
	return c
}

// Ensure resolves ref (see ParseRef), unpacks the image's flattened root
// filesystem unless this digest is already unpacked, and returns it.
// Concurrent calls for one digest share a single unpack, which runs
// detached from every caller's cancellation, bounded by unpackTimeout
// (coalesce.Group): a caller whose ctx ends stops waiting, with ctx's
// error, and the unpack goes on — for the callers still waiting, and to
// fill the cache for later ones. A caller whose ctx has already ended when
// the image is not cached starts no unpack. The shared unpack opens the
// image itself (re-resolving ref, pinned to the digest this caller saw), as
// the files a caller opens are closed when that caller returns.
//
// Errors wrap ErrBadRef, ErrPathNotAllowed (a local path outside the
// cache's LocalRoots), ErrNotFound, ErrAmbiguous, ErrUnsafePath,
// ErrDigestMismatch (ref changed between resolving it and the shared unpack
// opening it), coalesce.ErrExpired (the unpack ran out of unpackTimeout),
// or the underlying I/O or registry error. On error nothing is left under the
// final rootfs name. A registry image is pulled as no atespace (see
// EnsurePinned for an atespace's).
func (c *Cache) Ensure(ctx context.Context, ref string) (*Image, error) {
	return c.ensure(ctx, "", ref)
}

// ensure is Ensure with atespace's registry credentials.
func (c *Cache) ensure(ctx context.Context, atespace, ref string) (*Image, error) {
	r, auth, digest, cfg, err := c.inspect(ctx, atespace, ref)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(c.dir)
	if err != nil {
		return nil, fmt.Errorf("image cache dir: %w", err)
	}
	out := &Image{
		Digest: digest.String(),
		RootFS: filepath.Join(dir, "rootfs", digest.Hex),
		Config: cfg,
	}
	switch done, err := isDir(out.RootFS); {
	case err != nil:
		return nil, err
	case done:
		c.logger.Debug("image cached", "ref", r.String(), "rootfs", out.RootFS)
		return out, nil
	}

	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("unpack %s: %w", r, context.Cause(ctx))
	}
	if err := c.unpackShared(ctx, r, auth, digest, out.RootFS); err != nil {
		return nil, err
	}
	return out, nil
}

// Inspect resolves ref and returns its image configuration without
// unpacking anything: how the API server checks, when a template is
// created, that its image exists and which ports it exposes. Errors are
// Ensure's, before any unpack: a missing oci: layout or oci-archive wraps
// ErrNotFound and names the path. A registry image is read with
// atespace's credentials; one they may not read wraps ErrUnauthorized.
func (c *Cache) Inspect(ctx context.Context, atespace, ref string) (Config, error) {
	_, _, _, cfg, err := c.inspect(ctx, atespace, ref)
	return cfg, err
}

// inspect parses and resolves ref with atespace's credentials and reads
// its digest and configuration, closing what it opened. It returns the
// credentials, for the unpack that follows.
func (c *Cache) inspect(ctx context.Context, atespace, ref string) (Ref, authn.Keychain, v1.Hash, Config, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return Ref{}, nil, v1.Hash{}, Config{}, err
	}
	auth, whose := anonymousKeychain, ""
	if r.Transport == TransportRegistry {
		if auth, whose, err = c.creds.Keychain(atespace); err != nil {
			return Ref{}, nil, v1.Hash{}, Config{}, err
		}
	}
	img, closer, err := c.resolve(ctx, r, auth)
	if errors.Is(err, ErrUnauthorized) {
		return Ref{}, nil, v1.Hash{}, Config{}, fmt.Errorf("%w; pulled %s", err, whose)
	}
	if err != nil {
		return Ref{}, nil, v1.Hash{}, Config{}, err
	}
	defer func() { _ = closer.Close() }()
	digest, err := img.Digest()
	if err != nil {
		return Ref{}, nil, v1.Hash{}, Config{}, fmt.Errorf("digest of %s: %w", r, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return Ref{}, nil, v1.Hash{}, Config{}, fmt.Errorf("config of %s: %w", r, err)
	}
	return r, auth, digest, c.config(cf, digest), nil
}

// unpackShared unpacks image digest of r into root, joining an unpack of
// the same digest already in flight instead of starting a second one, and
// waits for it or for ctx to end.
//
// Callers of other atespaces may join one unpack, which pulls with the
// first one's credentials: each of them already read the digest with
// its own (inspect), so none gains an image it could not read.
func (c *Cache) unpackShared(ctx context.Context, r Ref, auth authn.Keychain, digest v1.Hash, root string) error {
	_, _, err := c.flight.Do(ctx, filepath.Base(root), func(ctx context.Context) (any, error) {
		return nil, c.unpack(ctx, r, auth, digest, root)
	})
	if err != nil && ctx.Err() != nil && err == context.Cause(ctx) {
		// We stopped waiting; the unpack goes on without us.
		return fmt.Errorf("unpack %s: %w", r, err)
	}
	return err
}

// unpack opens r, checks that it still is image digest, extracts its
// flattened layers into a temporary directory next to root and renames that
// to root. It runs at most once at a time per digest, on the shared
// unpack's detached ctx, and closes what it opened before returning.
func (c *Cache) unpack(ctx context.Context, r Ref, auth authn.Keychain, digest v1.Hash, root string) (err error) {
	// A previous flight may have finished between Ensure's check and ours.
	if done, err := isDir(root); err != nil || done {
		return err
	}
	// Open the image anew, pinned to the digest where the transport allows
	// it: the caller's image reads files that caller closes when it stops
	// waiting, and a tag may have moved since it resolved.
	if r.Transport == TransportRegistry {
		r.Remote = r.Remote.Context().Digest(digest.String())
	}
	img, closer, err := c.resolve(ctx, r, auth)
	if err != nil {
		return err
	}
	defer func() { _ = closer.Close() }()
	switch d, err := img.Digest(); {
	case err != nil:
		return fmt.Errorf("digest of %s: %w", r, err)
	case d != digest:
		return fmt.Errorf("%w: %s changed while it was being unpacked: now %s, was %s", ErrDigestMismatch, r, d, digest)
	}
	c.unpacks.Add(1)
	start := time.Now()
	parent := filepath.Dir(root)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("image cache dir: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".unpack-"+filepath.Base(root)[:12]+"-")
	if err != nil {
		return fmt.Errorf("image cache dir: %w", err)
	}
	defer func() {
		if err == nil {
			return
		}
		_ = os.RemoveAll(tmp)
	}()

	// mutate.Extract streams the flattened filesystem: layers top-down,
	// each path once, whiteouts applied (see extract.go for what that order
	// means for the writer).
	rc := mutate.Extract(img)
	defer rc.Close()
	st, err := extractTar(ctx, rc, tmp, c.logger)
	if err != nil {
		return fmt.Errorf("unpack %s: %w", r, err)
	}
	if err := os.Rename(tmp, root); err != nil {
		// Another process sharing the cache dir won the race: its copy is
		// as good as ours.
		if done, _ := isDir(root); done {
			_ = os.RemoveAll(tmp)
			return nil
		}
		return fmt.Errorf("unpack %s: %w", r, err)
	}
	c.logger.Info("unpacked image", "ref", r.String(), "rootfs", root,
		"files", st.files, "bytes", st.bytes, "skipped", st.skipped,
		"duration", time.Since(start).Round(time.Millisecond))
	return nil
}

// config converts the image configuration, dropping ports it cannot parse
// (the image is third-party input; a bad port should not make it unusable).
func (c *Cache) config(cf *v1.ConfigFile, digest v1.Hash) Config {
	cfg := Config{
		Entrypoint: cf.Config.Entrypoint,
		Cmd:        cf.Config.Cmd,
		Env:        cf.Config.Env,
		WorkingDir: cf.Config.WorkingDir,
	}
	for p := range cf.Config.ExposedPorts {
		num, proto, _ := strings.Cut(p, "/")
		if proto != "" && !strings.EqualFold(proto, "tcp") {
			continue
		}
		n, err := strconv.Atoi(num)
		if err != nil || n < 1 || n > 65535 {
			c.logger.Warn("ignoring malformed exposed port", "digest", digest.String(), "port", p)
			continue
		}
		cfg.ExposedPorts = append(cfg.ExposedPorts, n)
	}
	slices.Sort(cfg.ExposedPorts)
	cfg.ExposedPorts = slices.Compact(cfg.ExposedPorts)
	return cfg
}

// isDir reports whether p exists as a directory.
func isDir(p string) (bool, error) {
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("image cache: %w", err)
	}
	return fi.IsDir(), nil
}
