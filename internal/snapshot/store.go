package snapshot

import (
	"context"
	"sync"
)

// Store is a snapshot store: Local (a directory) or the S3 store
// (internal/snapshot/s3, object storage behind a local cache). Both are
// safe for concurrent use.
//
// A snapshot is written by Stage, writing files into Staged.Dir, then
// Commit (or Abort); it is complete, and visible to Open, only once Commit
// returns. References are "<owner>/<id>", ids start with the UTC millisecond of
// Stage.
type Store interface {
	// Stage creates an empty local staging directory for a new snapshot
	// of owner (an actor or template uid, never containing '/') with id
	// (NewID's form; "" = a new one). The workflow that will record the
	// reference names it, so the time in the id is that workflow's
	// clock's; the garbage collection compares no time
	// (lifecycle.OrphanCollection).
	Stage(owner, id string) (*Staged, error)
	// Abort removes a staged snapshot.
	Abort(s *Staged) error
	// Commit makes the staged files durable in the store, manifest last,
	// and returns the reference with the manifest's digest (digest.go);
	// the staged directory is consumed.
	Commit(ctx context.Context, s *Staged, scope Scope) (ref string, err error)
	// Open returns a local directory holding ref's files, verified against
	// its manifest, and the manifest against the digest ref records (a
	// mismatch is ErrCorrupt, whatever the files hold). Errors wrap
	// ErrNotFound or ErrCorrupt. The caller must
	// Close the result when done reading the directory.
	Open(ctx context.Context, ref string) (*Opened, error)
	// Committed reports whether ref is complete, reading its manifest
	// only: when it is, it returns ref with its manifest digest (the
	// reference to record); an error wrapping ErrNotFound when it is not,
	// ErrCorrupt when ref records a digest its manifest does not have,
	// any other error when the store could not tell.
	Committed(ctx context.Context, ref string) (string, error)
	// Import copies the complete snapshot at srcDir (e.g. a node's paused
	// copy) into the store as a new snapshot of owner; with ScopeData only
	// its volumes.
	Import(ctx context.Context, owner, id, srcDir string, scope Scope) (ref string, err error)
	// Clone makes a new, independent snapshot of owner (id as Stage's)
	// with the content of the complete snapshot src, sharing bytes where
	// the store can (Local: hard links; S3: server-side object copies, no
	// bytes through this process), manifest last. Errors wrap ErrNotFound
	// when src is not complete. Tags and forks (docs/actors.md).
	Clone(ctx context.Context, src, owner, id string) (ref string, err error)
	// Delete removes ref; deleting a missing one succeeds.
	Delete(ctx context.Context, ref string) error
	// DeleteOwner removes every snapshot of owner.
	DeleteOwner(ctx context.Context, owner string) error
	// List returns every reference that has any file or object, complete
	// or not, so garbage collection also finds what a crash left
	// half-written.
	List(ctx context.Context) ([]string, error)
	// ClearStaging removes leftovers of staging; call it at start-up
	// only, before anything stages a snapshot.
	ClearStaging() error
}

var _ Store = (*Local)(nil)

// Opened is a snapshot opened for reading: Dir holds its files as the
// manifest lists them. Dir stays valid until Close, and is read-only to
// the caller: for the S3 store it is the cache entry later Opens share.
type Opened struct {
	Dir      string
	Manifest *Manifest

	once    sync.Once
	release func()
}

// NewOpened returns an Opened whose Close calls release once (nil: a
// no-op). For Store implementations outside this package.
func NewOpened(dir string, m *Manifest, release func()) *Opened {
	return &Opened{Dir: dir, Manifest: m, release: release}
}

// Close releases the snapshot: for the S3 store it unpins the cache entry,
// which may then be evicted; for Local it does nothing. Safe to call more
// than once.
func (o *Opened) Close() {
	o.once.Do(func() {
		if o.release != nil {
			o.release()
		}
	})
}
