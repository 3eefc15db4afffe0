package s3

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Errors New returns; each is wrapped with the endpoint, bucket and the
// server's answer.
var (
	// ErrBadURL: the s3:// URL or the Config is malformed.
	ErrBadURL = errors.New("bad S3 snapshot store URL")
	// ErrUnreachable: the endpoint did not answer (connection refused, DNS,
	// timeout).
	ErrUnreachable = errors.New("S3 endpoint unreachable")
	// ErrCredentials: the endpoint rejected the credentials (AccessDenied,
	// SignatureDoesNotMatch, InvalidAccessKeyId, …).
	ErrCredentials = errors.New("S3 credentials rejected")
	// ErrNoBucket: the bucket does not exist at the endpoint.
	ErrNoBucket = errors.New("no such S3 bucket")
)

// Compression names, as they appear in the URL (compression=…) and in
// manifests (snapshot.File.Compression).
const (
	CompressionZstd = "zstd"
	CompressionNone = "none"
)

// Defaults for Config's zero fields.
const (
	// DefaultCacheBytes bounds the local cache: 10 GiB holds several
	// thousand of the ~1.7 MB checkpoints BENCHMARKS.md measures, and a
	// node's disk is far larger.
	DefaultCacheBytes = 10 << 30
	// DefaultPartSize is the multipart part size: 16 MiB keeps a part
	// count of 10000 (S3's maximum) above a 150 GiB object, while the
	// buffers for one large upload (PartThreads parts) stay at 32 MiB.
	DefaultPartSize = 16 << 20
	// DefaultCheckTimeout bounds New's probe of endpoint, credentials and
	// bucket, so a wrong endpoint fails start-up instead of hanging it.
	DefaultCheckTimeout = 10 * time.Second
	// DefaultRegion is sent when the URL names none; S3-compatible
	// servers (SeaweedFS, MinIO) accept it.
	DefaultRegion = "us-east-1"
)

// Config configures the S3 snapshot store. ParseURL fills the object
// storage part from an s3:// URL; the caller adds the cache.
type Config struct {
	// Endpoint is host[:port] of the S3 API; empty means AWS
	// (s3.amazonaws.com).
	Endpoint string
	// Secure selects https (the default for AWS; an http:// endpoint in
	// the URL clears it).
	Secure bool
	// Region is the bucket's region; empty means DefaultRegion.
	Region string
	// Bucket must exist: New does not create it.
	Bucket string
	// Prefix is prepended to every key ("<prefix>/<owner>/<id>/<file>");
	// no leading or trailing slash; may be empty.
	Prefix string
	// Compression is CompressionZstd (the default, "") or CompressionNone.
	Compression string

	// Creds are the credentials; nil means the AWS chain: the
	// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN
	// environment variables, then the shared credentials file
	// (AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials, profile
	// AWS_PROFILE or "default").
	Creds *credentials.Credentials

	// CacheDir is the node-local cache directory (created); required.
	// Staging happens inside it, so commits move into the cache by rename.
	CacheDir string
	// CacheBytes bounds the cache's content in bytes (uncompressed file
	// sizes); zero means DefaultCacheBytes. Pinned entries may exceed it.
	CacheBytes int64
	// PartSize is the multipart part size in bytes (at least 5 MiB); zero
	// means DefaultPartSize. Files larger than one part are uploaded as
	// multipart uploads of PartThreads parallel parts.
	PartSize uint64
	// CheckTimeout bounds New's probe; zero means DefaultCheckTimeout.
	CheckTimeout time.Duration

	// Transport, if set, carries every request (tests count requests with
	// it); nil means minio-go's default transport.
	Transport http.RoundTripper
	// Logger receives warnings (e.g. a cache write that failed after a
	// successful commit); nil discards.
	Logger *slog.Logger
}

// RedactURL is raw as errors and logs may show it: user info (an access
// key and secret put there by mistake) and the values of parameters
// other than endpoint, region and compression are replaced by xxxxx, and
// the endpoint's own user info too. An unparsable raw is not shown.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable URL>"
	}
	if u.User != nil {
		u.User = url.User("xxxxx")
	}
	q := u.Query()
	for k, vs := range q {
		for i, v := range vs {
			switch k {
			case "region", "compression":
			case "endpoint":
				if e, err := url.Parse(v); err != nil {
					vs[i] = "xxxxx"
				} else if e.User != nil {
					e.User = url.User("xxxxx")
					vs[i] = e.String()
				}
			default:
				vs[i] = "xxxxx"
			}
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// ParseURL parses s3://bucket[/prefix][?endpoint=http[s]://host:port&region=R&compression=zstd|none]
// into a Config (without cache settings). Without endpoint the store is
// AWS S3 over https. Unknown query parameters are an error, so a typo is
// not silently ignored. Errors wrap ErrBadURL.
func ParseURL(raw string) (Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// net/url's errors quote parts of the URL ("invalid port
		// \":<secret up to its first slash>\" after host"): none is
		// repeated, only what kind of mistake it is.
		return Config{}, fmt.Errorf("%w: not a URL of the form s3://bucket/prefix?endpoint=http[s]://host:port (%s)", ErrBadURL, urlErrorKind(err))
	}
	// Errors name the URL as RedactURL shows it: whatever secret was
	// put in it by mistake is not repeated into logs.
	shown := RedactURL(raw)
	if u.Scheme != "s3" {
		return Config{}, fmt.Errorf("%w: %q: scheme must be s3", ErrBadURL, shown)
	}
	if u.Host == "" {
		return Config{}, fmt.Errorf("%w: %q: no bucket (want s3://bucket/prefix)", ErrBadURL, shown)
	}
	if u.User != nil {
		return Config{}, fmt.Errorf("%w: %q: credentials do not belong in the URL (use AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or ~/.aws/credentials)", ErrBadURL, shown)
	}
	cfg := Config{
		Bucket: u.Host,
		Prefix: strings.Trim(u.Path, "/"),
		Secure: true,
	}
	for k, v := range u.Query() {
		if len(v) != 1 {
			return Config{}, fmt.Errorf("%w: %q: %s given %d times", ErrBadURL, shown, k, len(v))
		}
		switch k {
		case "endpoint":
			e, err := url.Parse(v[0])
			if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" || (e.Path != "" && e.Path != "/") || e.User != nil {
				return Config{}, fmt.Errorf("%w: %q: endpoint must be http://host:port or https://host:port", ErrBadURL, shown)
			}
			cfg.Endpoint, cfg.Secure = e.Host, e.Scheme == "https"
		case "region":
			cfg.Region = v[0]
		case "compression":
			cfg.Compression = v[0]
		default:
			return Config{}, fmt.Errorf("%w: %q: unknown parameter %q (want endpoint, region, compression)", ErrBadURL, shown, k)
		}
	}
	if err := cfg.validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// validate checks what New needs and fills defaults in place.
func (c *Config) validate() error {
	if c.Bucket == "" {
		return fmt.Errorf("%w: no bucket", ErrBadURL)
	}
	if strings.Contains(c.Prefix, "//") || strings.HasPrefix(c.Prefix, "/") || strings.HasSuffix(c.Prefix, "/") {
		return fmt.Errorf("%w: prefix %q: no leading, trailing or double slashes", ErrBadURL, c.Prefix)
	}
	switch c.Compression {
	case "":
		c.Compression = CompressionZstd
	case CompressionZstd, CompressionNone:
	default:
		return fmt.Errorf("%w: compression %q: want %s or %s", ErrBadURL, c.Compression, CompressionZstd, CompressionNone)
	}
	if c.Endpoint == "" {
		c.Endpoint, c.Secure = "s3.amazonaws.com", true
	}
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	if c.CacheBytes == 0 {
		c.CacheBytes = DefaultCacheBytes
	}
	if c.PartSize == 0 {
		c.PartSize = DefaultPartSize
	}
	if c.PartSize < 5<<20 {
		return fmt.Errorf("%w: part size %d bytes below S3's minimum of 5 MiB", ErrBadURL, c.PartSize)
	}
	if c.CheckTimeout == 0 {
		c.CheckTimeout = DefaultCheckTimeout
	}
	return nil
}

// URL is the s3:// URL of the store cfg describes (ParseURL's inverse,
// for logs and tests).
func (c Config) URL() string {
	u := url.URL{Scheme: "s3", Host: c.Bucket, Path: "/" + c.Prefix}
	q := url.Values{}
	if c.Endpoint != "" {
		scheme := "http"
		if c.Secure {
			scheme = "https"
		}
		q.Set("endpoint", scheme+"://"+c.Endpoint)
	}
	if c.Region != "" {
		q.Set("region", c.Region)
	}
	if c.Compression != "" {
		q.Set("compression", c.Compression)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// urlErrorKind names what url.Parse found wrong without quoting the URL.
func urlErrorKind(err error) string {
	var esc url.EscapeError
	var host url.InvalidHostError
	switch {
	case errors.As(err, &esc):
		return "a bad %-escape"
	case errors.As(err, &host):
		return "a bad character in the host"
	case strings.Contains(err.Error(), "invalid port"):
		return "a bad port, or credentials, which do not belong in the URL"
	default:
		return "unparsable"
	}
}
