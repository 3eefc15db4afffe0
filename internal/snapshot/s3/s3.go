// Package s3 is the S3 snapshot store: snapshots in an S3-compatible
// bucket (AWS S3, SeaweedFS, MinIO), behind a node-local cache so a
// resume on the node that suspended reads no object storage.
//
// Object layout: <prefix>/<owner>/<id>/<file>[.zst], then
// <prefix>/<owner>/<id>/manifest.json, written last: a snapshot without a
// manifest is incomplete (Open: snapshot.ErrNotFound) and List still
// returns it, so garbage collection deletes what a crash mid-upload left.
// Each file's manifest entry records its uncompressed size and SHA-256;
// Open verifies both and never returns bad bytes.
//
// The client is minio-go v7 rather than aws-sdk-go-v2: one module (the
// AWS SDK is a dozen), multipart upload of unknown-length streams with
// parallel parts built in (the SDK needs its separate manager), and the
// AWS credential chain (environment, shared credentials file) included.
// Compression is zstd (klauspost/compress), at its fastest level, on by
// default; BENCHMARKS.md ("S3 snapshot store") measures what it saves.
package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"golang.org/x/sync/errgroup"

	"substrate.dev/ate/internal/codec"
	"substrate.dev/ate/internal/snapshot"
)

// maxRetries bounds minio-go's retries of one request (its default is
// 10, with backoff up to 30 s): enough for a throttled or restarting
// server, short enough that a dead one fails the checkpoint in seconds.
const maxRetries = 4

// cleanupTimeout bounds the removal of a failed commit's objects; what it
// does not remove, garbage collection does (List returns the ref).
const cleanupTimeout = 30 * time.Second

// Store is the S3 snapshot store. Safe for concurrent use.
type Store struct {
	cfg    Config
	client *minio.Client
	cache  *cache
	enc    *zstd.Encoder // for EncodeAll only, which is safe for concurrent use
	log    *slog.Logger
}

var _ snapshot.Store = (*Store)(nil)

// New connects to the bucket cfg names and opens the local cache. It
// checks endpoint, credentials and bucket with one listing bounded by
// cfg.CheckTimeout; its errors wrap ErrBadURL, ErrUnreachable,
// ErrCredentials or ErrNoBucket and name the endpoint and bucket.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.CacheDir == "" {
		return nil, fmt.Errorf("%w: no cache directory", ErrBadURL)
	}
	if cfg.Creds == nil {
		cfg.Creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{},
			&credentials.FileAWSCredentials{}, // AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials, AWS_PROFILE
		})
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	client, err := newClient(cfg, maxRetries)
	if err != nil {
		return nil, err
	}
	if err := check(ctx, cfg); err != nil {
		return nil, err
	}
	c, err := newCache(cfg.CacheDir, cfg.CacheBytes)
	if err != nil {
		return nil, err
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		return nil, err
	}
	return &Store{cfg: cfg, client: client, cache: c, enc: enc, log: log}, nil
}

func newClient(cfg Config, retries int) (*minio.Client, error) {
	lookup := minio.BucketLookupPath // S3-compatible servers rarely do virtual hosts
	if cfg.Endpoint == "s3.amazonaws.com" || strings.HasSuffix(cfg.Endpoint, ".amazonaws.com") {
		lookup = minio.BucketLookupAuto
	}
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:        cfg.Creds,
		Secure:       cfg.Secure,
		Region:       cfg.Region,
		BucketLookup: lookup,
		Transport:    cfg.Transport,
		MaxRetries:   retries,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: endpoint %q: %v", ErrBadURL, cfg.Endpoint, err)
	}
	return client, nil
}

// check lists at most one key of the bucket, with a client that does not
// retry, and turns the answer into one of New's errors.
func check(ctx context.Context, cfg Config) error {
	probe, err := newClient(cfg, 1)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.CheckTimeout)
	defer cancel()
	for o := range probe.ListObjects(ctx, cfg.Bucket, minio.ListObjectsOptions{Prefix: cfg.Prefix, MaxKeys: 1}) {
		err = o.Err
		break
	}
	if err == nil {
		return nil
	}
	where := fmt.Sprintf("bucket %s at endpoint %s", cfg.Bucket, cfg.Endpoint)
	code := minio.ToErrorResponse(err).Code
	switch code {
	case "NoSuchBucket":
		return fmt.Errorf("%w: bucket %s does not exist at endpoint %s", ErrNoBucket, cfg.Bucket, cfg.Endpoint)
	case "AccessDenied", "SignatureDoesNotMatch", "InvalidAccessKeyId", "InvalidToken", "ExpiredToken", "InvalidSecurity", "AuthorizationHeaderMalformed":
		hint := "check AWS_SECRET_ACCESS_KEY or the shared credentials file"
		if v, verr := cfg.Creds.GetWithContext(&credentials.CredContext{Client: http.DefaultClient}); verr != nil || v.AccessKeyID == "" {
			hint = "no credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile in ~/.aws/credentials"
		} else {
			hint = "access key " + v.AccessKeyID + ": " + hint
		}
		return fmt.Errorf("%w: %s: %s (%s)", ErrCredentials, where, code, hint)
	case "":
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %s: no answer within %s", ErrUnreachable, where, cfg.CheckTimeout)
		}
		return fmt.Errorf("%w: %s: %v", ErrUnreachable, where, err)
	}
	return fmt.Errorf("check %s: %w", where, err)
}

// Config returns the store's configuration, defaults filled in.
func (s *Store) Config() Config { return s.cfg }

// CacheStats returns the local cache's content in bytes (uncompressed
// file sizes, pinned entries included) and its number of snapshots.
func (s *Store) CacheStats() (bytes int64, snapshots int) { return s.cache.stats() }

// root is the key prefix of every object: "<prefix>/", or "" for none.
func (s *Store) root() string {
	if s.cfg.Prefix == "" {
		return ""
	}
	return s.cfg.Prefix + "/"
}

// Stage creates an empty staging directory for a new snapshot of owner,
// inside the cache directory so Commit moves it into the cache by rename.
func (s *Store) Stage(owner, id string) (*snapshot.Staged, error) {
	id, err := snapshot.StageID(owner, id)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(s.cfg.CacheDir, stagingDir, id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("stage snapshot: %w", err)
	}
	return &snapshot.Staged{Owner: owner, ID: id, Dir: dir}, nil
}

// Abort removes a staged snapshot; its objects, if Commit failed midway,
// are left for garbage collection (List returns them).
func (s *Store) Abort(st *snapshot.Staged) error { return os.RemoveAll(st.Dir) }

// Commit uploads every staged file (compressed per Config.Compression,
// checksummed), then the manifest, and moves the staged directory into
// the local cache. It returns "<owner>/<id>@sha256:<manifest digest>";
// only after it returns is
// the snapshot complete. On error, objects already uploaded are removed
// as far as possible (the rest are an incomplete ref for GC) and the
// staged directory stays for Abort.
func (s *Store) Commit(ctx context.Context, st *snapshot.Staged, scope snapshot.Scope) (string, error) {
	ref := st.Owner + "/" + st.ID
	m, data, err := s.uploadAll(ctx, ref, st.Dir, scope)
	if err != nil {
		// Bounded, and not by ctx: a cancelled commit should still clean
		// up, but a dead endpoint must not hold the caller long.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if rerr := s.removePrefix(cctx, s.root()+ref+"/"); rerr != nil {
			s.log.Warn("removing objects of a failed commit", "ref", ref, "err", rerr)
		}
		return "", fmt.Errorf("commit snapshot %s: %w", ref, err)
	}
	// The snapshot is complete in the bucket; the cache is an optimisation
	// from here on, so its failures are logged, not returned.
	digest := snapshot.ManifestDigest(data)
	if _, err := s.cache.insert(ref, digest, st.Dir, m, false); err != nil {
		s.log.Warn("caching a committed snapshot", "ref", ref, "err", err)
		_ = os.RemoveAll(st.Dir)
	}
	return snapshot.WithDigest(ref, data), nil
}

// uploadAll uploads the files of dir under ref's prefix, then the
// manifest, which it also writes (synced) into dir, and returns the
// manifest and its bytes.
func (s *Store) uploadAll(ctx context.Context, ref, dir string, scope snapshot.Scope) (*snapshot.Manifest, []byte, error) {
	m := &snapshot.Manifest{Ref: ref, CreateTime: time.Now().UTC(), Scope: scope}
	type file struct {
		rel  string
		mode fs.FileMode
	}
	var files []file
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case rel == snapshot.ManifestName:
			return fmt.Errorf("staged file %s: the name is reserved for the manifest", rel)
		case d.IsDir():
			m.Dirs = append(m.Dirs, rel)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			m.Symlinks = append(m.Symlinks, snapshot.Symlink{Name: rel, Target: target})
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			files = append(files, file{rel, info.Mode()})
		}
		return nil // devices, sockets, fifos are not data (as snapshot.CopyTree)
	})
	if err != nil {
		return nil, nil, err
	}
	base := s.root() + ref + "/"
	m.Files = make([]snapshot.File, len(files))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fileParallelism)
	for i, f := range files {
		g.Go(func() error {
			var err error
			m.Files[i], err = s.upload(gctx, base, dir, f.rel, f.mode)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	data, err := codec.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, nil, err
	}
	if err := snapshot.WriteFileSync(filepath.Join(dir, snapshot.ManifestName), data); err != nil {
		return nil, nil, err
	}
	key := base + snapshot.ManifestName
	if _, err := s.client.PutObject(ctx, s.cfg.Bucket, key, strings.NewReader(string(data)), int64(len(data)),
		minio.PutObjectOptions{ContentType: "application/json"}); err != nil {
		return nil, nil, fmt.Errorf("upload %s: %w", key, err)
	}
	return m, data, nil
}

// Open returns ref's files in a local directory: the cache entry if
// there is one, else a fresh download, every file verified against the
// manifest (size and SHA-256), then added to the cache. The entry is
// pinned (never evicted) until the result's Close. Errors wrap
// snapshot.ErrNotFound (no manifest) or snapshot.ErrCorrupt (a file
// missing, truncated or not matching; the message names the object key
// and both checksums, or a manifest that is not the one ref's digest
// names), or are the object storage's. A cache entry is used only when
// its manifest has ref's digest.
func (s *Store) Open(ctx context.Context, ref string) (*snapshot.Opened, error) {
	bare, digest, err := snapshot.ParseRef(ref)
	if err != nil {
		return nil, err
	}
	if o, cached := s.cache.acquire(bare); o != nil {
		if digest == "" || cached == digest {
			return o, nil
		}
		o.Close()
		return nil, fmt.Errorf("%w: %s: this node's cached copy has manifest digest %s, not the recorded %s; refusing it",
			snapshot.ErrCorrupt, bare, cached, digest)
	}
	base := s.root() + bare + "/"
	m, data, err := s.getManifest(ctx, ref, base)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(filepath.Join(s.cfg.CacheDir, fetchDir), "")
	if err != nil {
		return nil, err
	}
	o, err := s.fetchInto(ctx, bare, base, tmp, m, data)
	if err != nil {
		_ = os.RemoveAll(tmp)
		return nil, err
	}
	return o, nil
}

// Committed implements snapshot.Store: the manifest is uploaded last, so
// its presence is the commit; nothing else is downloaded.
func (s *Store) Committed(ctx context.Context, ref string) (string, error) {
	bare, _, err := snapshot.ParseRef(ref)
	if err != nil {
		return "", err
	}
	_, data, err := s.getManifest(ctx, ref, s.root()+bare+"/")
	if err != nil {
		return "", err
	}
	return snapshot.WithDigest(bare, data), nil
}

// getManifest reads the manifest object under base, the prefix of ref,
// and checks it against the digest ref records, if any, before it is
// parsed or trusted.
func (s *Store) getManifest(ctx context.Context, ref, base string) (*snapshot.Manifest, []byte, error) {
	key := base + snapshot.ManifestName
	obj, err := s.client.GetObject(ctx, s.cfg.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("open snapshot %s: %w", ref, err)
	}
	defer obj.Close()
	// A manifest is a few hundred bytes per file; 64 MiB is far beyond
	// any real one and stops a bogus object from filling memory.
	data, err := io.ReadAll(io.LimitReader(obj, 64<<20))
	if err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return nil, nil, fmt.Errorf("%w: %s", snapshot.ErrNotFound, ref)
		}
		return nil, nil, fmt.Errorf("open snapshot %s: %w", ref, err)
	}
	if err := snapshot.VerifyDigest(ref, data); err != nil {
		return nil, nil, err
	}
	ref = snapshot.Bare(ref)
	m, err := snapshot.ParseManifest(data, ref)
	if err != nil {
		return nil, nil, err
	}
	if m.Ref != ref {
		return nil, nil, fmt.Errorf("%w: %s: object %s is the manifest of %q", snapshot.ErrCorrupt, ref, key, m.Ref)
	}
	return m, data, nil
}

// fetchInto downloads ref into tmp (under the cache's .fetch), verified,
// and moves it into the cache, pinned.
func (s *Store) fetchInto(ctx context.Context, ref, base, tmp string, m *snapshot.Manifest, data []byte) (*snapshot.Opened, error) {
	for _, d := range m.Dirs {
		if !filepath.IsLocal(filepath.FromSlash(d)) {
			return nil, fmt.Errorf("%w: %s: manifest names directory %q outside the snapshot", snapshot.ErrCorrupt, ref, d)
		}
		if err := os.MkdirAll(filepath.Join(tmp, filepath.FromSlash(d)), 0o755); err != nil {
			return nil, err
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fileParallelism)
	for _, f := range m.Files {
		g.Go(func() error { return s.download(gctx, ref, base, tmp, f) })
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if err := makeSymlinks(tmp, ref, m.Symlinks); err != nil {
		return nil, err
	}
	if err := snapshot.WriteFileSync(filepath.Join(tmp, snapshot.ManifestName), data); err != nil {
		return nil, err
	}
	return s.cache.insert(ref, snapshot.ManifestDigest(data), tmp, m, true)
}

// makeSymlinks creates a manifest's symlinks under tmp through an
// os.Root: a link the manifest made first (a → /etc) is never followed
// by a later entry (a/cron.d/x), which would create links, as root,
// anywhere on the node. The manifest's digest pins what it says, not
// that it is safe: the node that wrote it may be compromised.
func makeSymlinks(tmp, ref string, links []snapshot.Symlink) error {
	if len(links) == 0 {
		return nil
	}
	root, err := os.OpenRoot(tmp)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, l := range links {
		name := filepath.FromSlash(l.Name)
		if !filepath.IsLocal(name) {
			return fmt.Errorf("%w: %s: manifest names link %q outside the snapshot", snapshot.ErrCorrupt, ref, l.Name)
		}
		if err := root.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			return fmt.Errorf("%w: %s: link %q: %w", snapshot.ErrCorrupt, ref, l.Name, err)
		}
		if err := root.Symlink(l.Target, name); err != nil {
			return fmt.Errorf("%w: %s: link %q: %w", snapshot.ErrCorrupt, ref, l.Name, err)
		}
	}
	return nil
}

// Import copies the complete snapshot at srcDir (e.g. a node's paused
// copy) into the store as a new snapshot of owner; with
// snapshot.ScopeData only its volumes.
func (s *Store) Import(ctx context.Context, owner, id, srcDir string, scope snapshot.Scope) (string, error) {
	return snapshot.ImportInto(ctx, s, owner, id, srcDir, scope)
}

// Delete removes every object of ref, manifest first (so a concurrent
// Open sees it gone, not corrupt), and its cache entry; a pinned entry
// goes at its last Close. Deleting a missing ref succeeds.
func (s *Store) Delete(ctx context.Context, ref string) error {
	ref, _, err := snapshot.ParseRef(ref)
	if err != nil {
		return err
	}
	s.cache.remove(ref)
	base := s.root() + ref + "/"
	if err := s.client.RemoveObject(ctx, s.cfg.Bucket, base+snapshot.ManifestName, minio.RemoveObjectOptions{}); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", ref, err)
	}
	if err := s.removePrefix(ctx, base); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", ref, err)
	}
	return nil
}

// DeleteOwner removes every object and cache entry of owner.
func (s *Store) DeleteOwner(ctx context.Context, owner string) error {
	if err := snapshot.ValidOwner(owner); err != nil {
		return err
	}
	s.cache.remove(owner + "/")
	if err := s.removePrefix(ctx, s.root()+owner+"/"); err != nil {
		return fmt.Errorf("delete snapshots of %s: %w", owner, err)
	}
	return nil
}

// removePrefix deletes every object whose key starts with prefix, in
// multi-object DELETE batches.
func (s *Store) removePrefix(ctx context.Context, prefix string) error {
	objects := make(chan minio.ObjectInfo)
	listErr := make(chan error, 1)
	go func() {
		defer close(objects)
		for o := range s.client.ListObjects(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if o.Err != nil {
				listErr <- o.Err
				return
			}
			select {
			case objects <- o:
			case <-ctx.Done():
				return
			}
		}
	}()
	var err error
	for r := range s.client.RemoveObjects(ctx, s.cfg.Bucket, objects, minio.RemoveObjectsOptions{}) {
		if r.Err != nil && err == nil {
			err = fmt.Errorf("remove %s: %w", r.ObjectName, r.Err)
		}
	}
	select {
	case lerr := <-listErr:
		return errors.Join(err, fmt.Errorf("list %s: %w", prefix, lerr))
	default:
		return err
	}
}

// List returns "<owner>/<id>" of every snapshot with any object under
// the prefix, complete or not, sorted. It lists every object rather than
// "directories" (delimiter listing): SeaweedFS keeps a deleted
// snapshot's empty folders for a while and reports them as prefixes.
func (s *Store) List(ctx context.Context) ([]string, error) {
	root := s.root()
	seen := map[string]bool{}
	for o := range s.client.ListObjects(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: root, Recursive: true}) {
		if o.Err != nil {
			return nil, fmt.Errorf("list snapshots under %q: %w", root, o.Err)
		}
		parts := strings.SplitN(strings.TrimPrefix(o.Key, root), "/", 3)
		if len(parts) == 3 && parts[0] != "" && parts[1] != "" && parts[2] != "" {
			seen[parts[0]+"/"+parts[1]] = true
		}
	}
	refs := make([]string, 0, len(seen))
	for ref := range seen {
		refs = append(refs, ref)
	}
	sort.Strings(refs)
	return refs, nil
}

// ClearStaging removes leftovers of staging (a crash between Stage and
// Commit). Call it at start-up only, before anything stages a snapshot.
func (s *Store) ClearStaging() error { return s.cache.clearStaging() }
