package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/renameio/v2"
)

// ErrDigestMismatch: a reference now names other content than the digest
// a template was built from (the image was rebuilt or replaced in place).
var ErrDigestMismatch = errors.New("image changed since the template was built")

// EnsurePinned is Ensure for an image a template pinned by digest: an
// already unpacked digest is served from the cache without resolving ref
// (so moving or rebuilding the source layout cannot break actors that were
// built from it), and a ref that now resolves to other content fails with
// ErrDigestMismatch instead of restoring a checkpoint onto a different
// binary. An empty digest means no pin: plain Ensure. A registry image is
// pulled with atespace's credentials (RegistryCredentials); a cached
// digest is served without them, as the atespace's template read that
// digest with them when it was built. The returned Image may be shared;
// callers must not modify it.
func (c *Cache) EnsurePinned(ctx context.Context, atespace, ref, digest string) (*Image, error) {
	if digest != "" {
		if img, ok := c.cached(digest); ok {
			return img, nil
		}
	}
	img, err := c.ensure(ctx, atespace, ref)
	if err != nil {
		return nil, err
	}
	if digest != "" && img.Digest != digest {
		return nil, fmt.Errorf("%w: %s is now %s, the template was built from %s; create a new template for the new image",
			ErrDigestMismatch, ref, img.Digest, digest)
	}
	// Record the config once per digest, so later calls pinned to it are
	// served by cached from memory. (Unpinned calls, the golden build's,
	// still resolve ref in Ensure; only the config rewrite is skipped.)
	if _, known := c.hits.Load(img.Digest); !known {
		if err := c.remember(img); err != nil {
			return nil, err
		}
		c.hits.Store(img.Digest, img)
	}
	return img, nil
}

func (c *Cache) configPath(digest string) string {
	return filepath.Join(c.dir, "config", strings.TrimPrefix(digest, "sha256:")+".json")
}

// cached returns the unpacked image of digest if both its root filesystem
// and its recorded config are on disk. A hit is remembered in memory:
// complete root filesystems are never modified, and reading and decoding
// the config on every start was a visible share of a wake-up's CPU
// (BENCHMARKS.md, Control plane: Where a wake-up's time goes).
// The returned Image is shared; callers must not modify it.
func (c *Cache) cached(digest string) (*Image, bool) {
	if img, ok := c.hits.Load(digest); ok {
		return img.(*Image), true
	}
	data, err := os.ReadFile(c.configPath(digest))
	if err != nil {
		return nil, false
	}
	var img Image
	if json.Unmarshal(data, &img) != nil || img.Digest != digest {
		return nil, false
	}
	if ok, err := isDir(img.RootFS); err != nil || !ok {
		return nil, false
	}
	c.hits.Store(digest, &img)
	return &img, true
}

// remember records img's config next to its root filesystem. renameio
// writes it to a temporary file of its own and renames it into place, so a
// reader never sees half of it and a cold start and a golden build
// remembering the same image at once do not collide.
func (c *Cache) remember(img *Image) error {
	p := c.configPath(img.Digest)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	data, err := json.Marshal(img)
	if err != nil {
		return err
	}
	return renameio.WriteFile(p, data, 0o600)
}
