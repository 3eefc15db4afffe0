// Package storeurl opens a snapshot store by URL. It is its own package
// because it imports both stores, and the S3 store imports package
// snapshot.
package storeurl

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/snapshot/s3"
)

// Options are what a URL does not say: where the node keeps things.
type Options struct {
	// CacheDir is the S3 store's local cache directory (required for s3://).
	CacheDir string
	// CacheBytes bounds the S3 store's cache in bytes; zero means
	// s3.DefaultCacheBytes.
	CacheBytes int64
	// Logger is handed to the store; nil discards.
	Logger *slog.Logger
}

// Open returns the snapshot store rawURL names:
//
//   - a plain path or file:///path: snapshot.Local rooted there,
//     keeping small files zstd-compressed (snapshot.LocalOptions);
//   - s3://bucket/prefix?endpoint=http://host:port&region=R&compression=zstd|none:
//     the S3 store (s3.ParseURL), caching in opts.CacheDir. Its
//     construction checks endpoint, credentials and bucket (s3.New).
//
// Errors for a malformed URL wrap s3.ErrBadURL.
func Open(ctx context.Context, rawURL string, opts Options) (snapshot.Store, error) {
	switch {
	case strings.HasPrefix(rawURL, "s3://"):
		cfg, err := s3.ParseURL(rawURL)
		if err != nil {
			return nil, err
		}
		cfg.CacheDir, cfg.CacheBytes, cfg.Logger = opts.CacheDir, opts.CacheBytes, opts.Logger
		return s3.New(ctx, cfg)
	case strings.HasPrefix(rawURL, "file://"):
		u, err := url.Parse(rawURL)
		if err != nil || (u.Host != "" && u.Host != "localhost") || u.Path == "" || u.RawQuery != "" {
			return nil, fmt.Errorf("%w: %q: want file:///absolute/path", s3.ErrBadURL, s3.RedactURL(rawURL))
		}
		return snapshot.NewLocalWith(u.Path, snapshot.LocalOptions{Compress: true})
	case rawURL == "" || strings.Contains(rawURL, "://"):
		return nil, fmt.Errorf("%w: %q: want a path, file:///path or s3://bucket/prefix", s3.ErrBadURL, s3.RedactURL(rawURL))
	}
	return snapshot.NewLocalWith(rawURL, snapshot.LocalOptions{Compress: true})
}
