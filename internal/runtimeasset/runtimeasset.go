// Package runtimeasset fetches a sandbox runtime's files (runsc) named by
// URL and SHA256 per architecture, as a SandboxConfig lists them, into a
// local cache, and hands out a file only once its digest matches.
//
// The cache holds <cache>/<sha256>/<name>. A download streams into a temp
// file in that directory while it is hashed and is renamed into place
// only when the digest matches, so the final path never holds a partial
// or wrong file. A cached file is hashed again on every Resolve: one
// changed on disk is removed and fetched again, never run.
package runtimeasset

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

const (
	// DefaultMaxBytes bounds a fetched file (512 MiB; runsc is ~60 MiB),
	// so a wrong URL cannot fill the disk.
	DefaultMaxBytes = 512 << 20
	// DefaultTimeout bounds one fetch, connection to last byte.
	DefaultTimeout = 5 * time.Minute
	// maxURLLen is the CRD's bound on RuntimeAsset.URL.
	maxURLLen = 2048
)

// Asset is one file of the sandbox runtime for one architecture, the
// shape of v1alpha1.RuntimeAsset.
type Asset struct {
	// Name is the file's name in the cache, e.g. runsc; no slashes.
	Name string
	// Architecture is a GOARCH value: amd64 or arm64.
	Architecture string
	// URL is https://, http:// or file:///absolute/path.
	URL string
	// SHA256 is the file's digest, 64 lowercase hex digits.
	SHA256 string
}

// Validate says what is wrong with a, naming the field and what it
// wants; nil when every field is well formed.
func (a Asset) Validate() error {
	if a.Name == "" || a.Name == "." || a.Name == ".." || strings.ContainsAny(a.Name, `/\`) {
		return fmt.Errorf("asset name %q: want a file name such as runsc", a.Name)
	}
	// The GOARCH values gVisor runs on, as the SandboxConfig CRD allows.
	if a.Architecture != "amd64" && a.Architecture != "arm64" {
		return fmt.Errorf("architecture %q: want a GOARCH value gVisor runs on, amd64 or arm64", a.Architecture)
	}
	if !isSHA256(a.SHA256) {
		return fmt.Errorf("sha256 %q: want 64 lowercase hex digits (the first field of sha256sum's output)", a.SHA256)
	}
	if _, err := parseURL(a.URL); err != nil {
		return err
	}
	return nil
}

func isSHA256(s string) bool {
	if len(s) != sha256.Size*2 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// parseURL accepts https:// and http:// with a host, and file:// with an
// absolute path on this machine (no host but localhost).
func parseURL(s string) (*url.URL, error) {
	if len(s) > maxURLLen {
		return nil, fmt.Errorf("url of %d bytes: at most %d", len(s), maxURLLen)
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("url %q: %w", s, err)
	}
	switch u.Scheme {
	case "https", "http":
		if u.Host == "" {
			return nil, fmt.Errorf("url %q: no host", s)
		}
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("url %q: a file:// URL names a file on this machine: file:///absolute/path", s)
		}
		if !filepath.IsAbs(u.Path) {
			return nil, fmt.Errorf("url %q: want file:///absolute/path", s)
		}
	default:
		return nil, fmt.Errorf("url %q: want https://, http:// or file://", s)
	}
	return u, nil
}

// Options configures Resolve.
type Options struct {
	// CacheDir holds the verified files (required); it is created.
	CacheDir string
	// Arch picks the asset; empty means runtime.GOARCH.
	Arch string
	// Client fetches http(s) URLs; nil means a client with
	// http.DefaultTransport (it honours HTTPS_PROXY and the like).
	Client *http.Client
	// Timeout bounds one fetch; zero means DefaultTimeout.
	Timeout time.Duration
	// MaxBytes bounds a fetched file in bytes; zero means DefaultMaxBytes.
	MaxBytes int64
	// Logger gets one Info line per Resolve (cached or fetched); nil
	// discards it.
	Logger *slog.Logger
}

// Resolve returns the absolute path of the verified file of the asset
// called name for this machine's architecture (Options.Arch) among
// assets: <CacheDir>/<sha256>/<name>, mode 0755, its content's digest
// equal to the asset's SHA256 when Resolve returned.
//
// A cached file is reused only if it hashes to the digest; otherwise it
// is removed and fetched again. Errors: an asset that fails Validate; no
// asset called name for the architecture, or two (the error names the
// architecture and those given); a fetch that fails (an HTTP status other
// than 200 is named with the URL), exceeds MaxBytes or Timeout; a digest
// mismatch, which leaves nothing at the final path.
func Resolve(ctx context.Context, opts Options, name string, assets []Asset) (string, error) {
	if opts.CacheDir == "" {
		return "", errors.New("runtimeasset: Options.CacheDir is required")
	}
	a, err := choose(name, cmp.Or(opts.Arch, runtime.GOARCH), assets)
	if err != nil {
		return "", err
	}
	cacheDir, err := filepath.Abs(opts.CacheDir)
	if err != nil {
		return "", fmt.Errorf("runtime asset cache: %w", err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("asset", a.Name, "architecture", a.Architecture, "url", a.URL, "sha256", a.SHA256)
	maxBytes := opts.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	dir := filepath.Join(cacheDir, a.SHA256)
	final := filepath.Join(dir, a.Name)

	switch ok, err := cached(final, a.SHA256, maxBytes); {
	case err != nil:
		return "", err
	case ok:
		// A file restored from a backup or copied by hand may have lost
		// its execute bits; the digest is what matters.
		if err := os.Chmod(final, 0o755); err != nil {
			return "", fmt.Errorf("%s: %w", a.Name, err)
		}
		log.Info("runtime asset verified in the cache", "path", final)
		return final, nil
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("runtime asset cache: %w", err)
	}
	start := time.Now()
	n, err := fetch(ctx, opts, a, dir, final, maxBytes)
	if err != nil {
		// Removes the digest's directory only if it is empty: a failed
		// fetch leaves no trace, and one running alongside is not
		// disturbed.
		_ = os.Remove(dir)
		return "", err
	}
	log.Info("runtime asset fetched and verified", "path", final, "bytes", n, "duration", time.Since(start))
	return final, nil
}

// choose returns the one asset called name for arch, after validating
// every asset called name (a malformed one for another architecture is
// still a mistake worth reporting).
func choose(name, arch string, assets []Asset) (Asset, error) {
	var found []Asset
	var archs []string
	for _, a := range assets {
		if a.Name != name {
			continue
		}
		if err := a.Validate(); err != nil {
			return Asset{}, fmt.Errorf("%s for %s: %w", name, a.Architecture, err)
		}
		archs = append(archs, a.Architecture)
		if a.Architecture == arch {
			found = append(found, a)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		given := "none"
		if len(archs) > 0 {
			given = strings.Join(archs, ", ")
		}
		return Asset{}, fmt.Errorf("no %s for this machine's architecture %s (given: %s)", name, arch, given)
	default:
		return Asset{}, fmt.Errorf("%s is given %d times for %s: want one", name, len(found), arch)
	}
}

// cached reports whether path is a regular file whose content hashes to
// want. Anything else at path (another digest, a link, a directory, an
// unreadable file) is removed so that the fetch can replace it; an error
// means it could not be.
func cached(path, want string, maxBytes int64) (bool, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err == nil && fi.Mode().IsRegular() {
		var got string
		if got, err = hashFile(path, maxBytes); err == nil && got == want {
			return true, nil
		}
	}
	// Whatever is there is not the file the digest names: it must not
	// run, and it must not outlive a fetch that fails.
	if err := os.RemoveAll(path); err != nil {
		return false, fmt.Errorf("remove cached %s that does not match its digest: %w", filepath.Base(path), err)
	}
	return false, nil
}

func hashFile(path string, maxBytes int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, maxBytes+1)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// fetch streams a's URL into a temp file in dir while hashing it and
// renames it to final if the digest matches; it returns the bytes read.
// The temp file is removed on every failure.
func fetch(ctx context.Context, opts Options, a Asset, dir, final string, maxBytes int64) (n int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(opts.Timeout, DefaultTimeout))
	defer cancel()
	src, err := open(ctx, opts.Client, a.URL, maxBytes)
	if err != nil {
		return 0, fmt.Errorf("fetch %s from %s: %w", a.Name, a.URL, err)
	}
	defer src.Close()

	tmp, err := os.CreateTemp(dir, "."+a.Name+"-*.part")
	if err != nil {
		return 0, fmt.Errorf("runtime asset cache: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	n, err = io.Copy(io.MultiWriter(tmp, h), io.LimitReader(src, maxBytes+1))
	if err != nil {
		return n, fmt.Errorf("fetch %s from %s: %w", a.Name, a.URL, err)
	}
	if n > maxBytes {
		return n, fmt.Errorf("fetch %s from %s: larger than %d bytes: refusing it", a.Name, a.URL, maxBytes)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != a.SHA256 {
		return n, fmt.Errorf("%s from %s has sha256 %s, the SandboxConfig says %s: refusing to run it", a.Name, a.URL, got, a.SHA256)
	}
	// Synced before the rename: after a crash the final path holds the
	// whole file or nothing (it is hashed again anyway).
	if err = tmp.Sync(); err != nil {
		return n, fmt.Errorf("runtime asset cache: %w", err)
	}
	if err = tmp.Chmod(0o755); err != nil {
		return n, fmt.Errorf("runtime asset cache: %w", err)
	}
	if err = tmp.Close(); err != nil {
		return n, fmt.Errorf("runtime asset cache: %w", err)
	}
	if err = os.Rename(tmp.Name(), final); err != nil {
		return n, fmt.Errorf("runtime asset cache: %w", err)
	}
	return n, nil
}

// open returns the body at rawURL: an http(s) GET answered 200, or a
// regular file for file://. A declared length over maxBytes is refused
// before reading.
func open(ctx context.Context, client *http.Client, rawURL string, maxBytes int64) (io.ReadCloser, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme == "file" {
		f, err := os.Open(u.Path)
		if err != nil {
			return nil, err
		}
		if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
			_ = f.Close()
			return nil, cmp.Or(err, fmt.Errorf("%s is not a regular file", u.Path))
		}
		return f, nil
	}
	if client == nil {
		client = &http.Client{}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("HTTP status %s", resp.Status)
	}
	if resp.ContentLength > maxBytes {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("declared length %d is larger than %d bytes: refusing it", resp.ContentLength, maxBytes)
	}
	return resp.Body, nil
}
