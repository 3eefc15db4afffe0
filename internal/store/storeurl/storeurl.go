// Package storeurl opens the record store a --store URL names:
//
//	bolt:///abs/path/ate.db, or a plain path   the embedded bbolt file
//	postgres://user:pass@host:port/db?…        PostgreSQL (also postgresql://)
//
// It is the one place that maps URLs to backends, for `ate up` and `ate
// apiserver` alike.
package storeurl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/store/bolt"
	"substrate.dev/ate/internal/store/postgres"
)

// Options are what backends need besides the URL.
type Options struct {
	// DefaultPath is the bolt file when the URL is empty.
	DefaultPath string
	Logger      *slog.Logger
}

// Opened is an open store and what it is.
type Opened struct {
	store.Store
	// Shared reports whether other API servers may use the store at once
	// (PostgreSQL): workflows then need store leases (lifecycle.New's
	// holder). A bolt file is locked by one process.
	Shared bool
	// Description names the store for logs, without credentials.
	Description string
}

// IsPostgres reports whether u names a PostgreSQL database.
func IsPostgres(u string) bool {
	return strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://")
}

// Open opens the store u names. Errors: a URL of no known kind, a bolt
// file another process holds (after 5 s), or the backend's — for
// PostgreSQL, store.ErrUnavailable (wrapped) while the server cannot be
// reached, which the caller may retry.
func Open(ctx context.Context, u string, opts Options) (*Opened, error) {
	if IsPostgres(u) {
		st, err := postgres.Open(ctx, u, postgres.Options{Logger: opts.Logger})
		if err != nil {
			return nil, err
		}
		return &Opened{Store: st, Shared: true, Description: Redact(u)}, nil
	}
	path, err := boltPath(u, opts.DefaultPath)
	if err != nil {
		return nil, err
	}
	st, err := bolt.Open(path, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("%w (is another API server using %s?)", err, path)
	}
	return &Opened{Store: st, Description: "bolt://" + path}, nil
}

// Backoff between OpenRetrying's attempts: retryFirst, doubling up to
// retryMax, so a database that comes up is reached within seconds while
// one that stays down is asked every few.
const (
	retryFirst = 200 * time.Millisecond
	retryMax   = 5 * time.Second
)

// OpenRetrying is Open, retried with backoff while the store cannot be
// reached (store.ErrUnavailable) — a database that starts after us, or
// restarts — each failure logged to opts.Logger. Errors: Open's other
// errors at once, or its last one when ctx ends.
func OpenRetrying(ctx context.Context, u string, opts Options) (*Opened, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	backoff := retryFirst
	for {
		opened, err := Open(ctx, u, opts)
		if err == nil {
			return opened, nil
		}
		if !errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil {
			return nil, err
		}
		log.Warn("record store unreachable; retrying", "store", Redact(u), "retryIn", backoff, "err", err)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, retryMax)
	}
}

// boltPath returns the file of a bolt:// store URL (or a plain path);
// empty means def.
func boltPath(u, def string) (string, error) {
	switch {
	case u == "":
		return def, nil
	case strings.HasPrefix(u, "bolt://"):
		p := strings.TrimPrefix(u, "bolt://")
		if !filepath.IsAbs(p) {
			return "", fmt.Errorf("store %q: want bolt:///absolute/path.db", Redact(u))
		}
		return p, nil
	case strings.Contains(u, "://"):
		return "", fmt.Errorf("store %q: want bolt:///path/ate.db or postgres://user:password@host:port/database", Redact(u))
	}
	return filepath.Abs(u)
}

// EnvVar names the environment variable a store URL is taken from when
// neither --store nor --store-file gives one.
const EnvVar = "ATE_STORE"

// Source is where the record store's URL comes from, in the order Resolve
// tries them: a command-line URL, a file holding it, then $ATE_STORE. A
// URL with a password belongs in the file or the environment, which other
// users of the machine cannot read; a command line they can (ps,
// /proc/<pid>/cmdline, a Pod's spec).
type Source struct {
	// URL is --store's value.
	URL string
	// File is --store-file's: a file whose content (surrounding white
	// space trimmed) is the URL, e.g. a mounted Kubernetes Secret key.
	File string
}

// Resolve returns the store URL s names, reading the file or, when s is
// empty, getenv(EnvVar) (empty: the default bolt store). passwordInArgs
// reports a password given in s.URL, which callers warn about. Errors:
// both URL and File given, the file unreadable or empty.
func Resolve(s Source, getenv func(string) string) (u string, passwordInArgs bool, err error) {
	switch {
	case s.URL != "" && s.File != "":
		return "", false, errors.New("--store and --store-file both given: give one")
	case s.URL != "":
		return s.URL, HasPassword(s.URL), nil
	case s.File != "":
		b, err := os.ReadFile(s.File)
		if err != nil {
			return "", false, fmt.Errorf("--store-file: %w", err)
		}
		u := strings.TrimSpace(string(b))
		if u == "" {
			return "", false, fmt.Errorf("--store-file %s: empty", s.File)
		}
		return u, false, nil
	}
	return getenv(EnvVar), false, nil
}

// HasPassword reports whether u carries a password, in its user info or
// as a password= parameter (an unparsable u is assumed to).
func HasPassword(u string) bool {
	p, err := url.Parse(u)
	if err != nil {
		return true
	}
	if _, ok := p.User.Password(); ok {
		return true
	}
	return p.Query().Has("password")
}

// Redact returns u with any password replaced, for logs and errors: the
// URL's own and a password= parameter (libpq's form, which pgx takes).
func Redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "<unparsable store URL>"
	}
	if q := p.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		p.RawQuery = q.Encode()
	}
	return p.Redacted()
}
