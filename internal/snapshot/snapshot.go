// Package snapshot is the snapshot store: where checkpoints live between a
// suspend and the next resume. Store is what every snapshot store does;
// Local is a directory (the default, under the data dir), the S3 store
// (internal/snapshot/s3) object storage behind a local cache, and
// storeurl.Open picks one by URL. A snapshot is complete only once its manifest is written, and
// it becomes visible under its final name only then, so a crash mid-write
// never leaves a snapshot that looks usable.
//
// Layout: <dir>/<owner>/<id>/{files…, manifest.json}; staging happens in
// <dir>/.staging/<id>/ and is renamed into place on Commit.
package snapshot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"substrate.dev/ate/internal/clock"
	"substrate.dev/ate/internal/codec"
)

// ManifestName is written last into every complete snapshot.
const ManifestName = "manifest.json"

// Scope is what a snapshot holds (docs/architecture.md, Glossary). Its zero value is
// ScopeFull, the default wherever a scope is optional. On the wire
// (templates' snapshotPolicy, manifests) it is its String.
type Scope uint8

// Snapshot scopes.
const (
	// ScopeFull: a runsc checkpoint — memory, root filesystem overlay —
	// and the volumes.
	ScopeFull Scope = iota
	// ScopeData: the volumes only; resuming it cold-boots the image.
	ScopeData
)

// String returns the scope's wire name: "Full" or "Data".
func (s Scope) String() string {
	switch s {
	case ScopeFull:
		return "Full"
	case ScopeData:
		return "Data"
	}
	return "Scope(" + strconv.Itoa(int(s)) + ")"
}

// ParseScope parses a scope's wire name; the empty string is ScopeFull
// (a template without snapshotPolicy). Anything else is an error naming
// the accepted values.
func ParseScope(s string) (Scope, error) {
	switch s {
	case "", "Full":
		return ScopeFull, nil
	case "Data":
		return ScopeData, nil
	}
	return ScopeFull, fmt.Errorf("unknown snapshot scope %q: want %s or %s", s, ScopeFull, ScopeData)
}

// MarshalText implements encoding.TextMarshaler (manifests keep the name).
func (s Scope) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseScope.
func (s *Scope) UnmarshalText(b []byte) error {
	v, err := ParseScope(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// VolumesDir is the subdirectory of a snapshot that holds a copy of each
// durable volume, one directory per volume name.
const VolumesDir = "volumes"

// ErrNotFound: no complete snapshot has that reference.
var ErrNotFound = errors.New("snapshot not found")

// ErrCorrupt: the snapshot's files do not match its manifest.
var ErrCorrupt = errors.New("snapshot corrupt")

// File is one regular file of a snapshot.
type File struct {
	// Name is the slash-separated path relative to the snapshot's directory.
	Name string `json:"name"`
	// Size is the file's length in bytes (uncompressed).
	Size int64 `json:"size"`
	// SHA256 is the hex SHA-256 of the file's (uncompressed) bytes. The S3
	// store records and verifies it; Local leaves it empty and checks sizes
	// only (its bytes never leave the node's disk).
	SHA256 string `json:"sha256,omitempty"`
	// Mode is the file's permission bits; zero (Local) means 0o600.
	Mode uint32 `json:"mode,omitempty"`
	// Compression is how the S3 store keeps the file's object: "" (as is)
	// or "zstd" (its key then ends in ".zst").
	Compression string `json:"compression,omitempty"`
	// StoredSize is the object's length in bytes as stored (compressed);
	// zero for Local.
	StoredSize int64 `json:"storedSize,omitempty"`
}

// Symlink is a symbolic link of a snapshot (a volume may hold some): Local
// keeps them in its directory; the S3 store records them here.
type Symlink struct {
	Name   string `json:"name"`
	Target string `json:"target"`
}

// Manifest describes a complete snapshot.
type Manifest struct {
	// Ref is "<owner>/<id>".
	Ref        string    `json:"ref"`
	CreateTime time.Time `json:"createTime"`
	// Scope is ScopeFull (memory, root filesystem overlay and volumes) or
	// ScopeData (volumes only: resuming it cold-boots the image).
	Scope Scope  `json:"scope"`
	Files []File `json:"files"`
	// Symlinks and Dirs (slash-separated, relative) are what the S3 store
	// must recreate besides Files: links, and directories (empty ones
	// included, e.g. an empty volume). Local leaves them empty: its
	// directory keeps them.
	Symlinks []Symlink `json:"symlinks,omitempty"`
	Dirs     []string  `json:"dirs,omitempty"`
}

// Local is a snapshot store in a local directory. Safe for concurrent use:
// every snapshot has its own directory and ids are random.
type Local struct {
	dir    string
	codecs *codecs
}

// NewLocal returns a snapshot store rooted at dir, creating it, that
// keeps files as they are written (it reads compressed ones).
func NewLocal(dir string) (*Local, error) {
	return NewLocalWith(dir, LocalOptions{})
}

// NewLocalWith is NewLocal with options (LocalOptions.Compress).
func NewLocalWith(dir string, o LocalOptions) (*Local, error) {
	if err := os.MkdirAll(filepath.Join(dir, ".staging"), 0o700); err != nil {
		return nil, fmt.Errorf("snapshot store %s: %w", dir, err)
	}
	c, err := newCodecs(o.Compress)
	if err != nil {
		return nil, fmt.Errorf("snapshot store %s: %w", dir, err)
	}
	return &Local{dir: dir, codecs: c}, nil
}

// Staged is a snapshot being written; write its files into Dir, then
// Commit or Abort it.
type Staged struct {
	Owner, ID, Dir string
}

// Stage creates an empty staging directory for a new snapshot of owner (an
// actor or template uid; a DNS-1123 label or uid, never containing '/').
func (l *Local) Stage(owner, id string) (*Staged, error) {
	id, err := StageID(owner, id)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(l.dir, ".staging", id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("stage snapshot: %w", err)
	}
	return &Staged{Owner: owner, ID: id, Dir: dir}, nil
}

// Abort removes a staged snapshot.
func (l *Local) Abort(s *Staged) error { return os.RemoveAll(s.Dir) }

// Commit makes every staged file durable (a compressing Local replaces
// each file it compresses by its fsynced compressed copy), writes the
// manifest last, and moves the snapshot to its final place. It returns
// the reference to store in the actor's record; only after Commit
// returns may the pointer move.
func (l *Local) Commit(_ context.Context, s *Staged, scope Scope) (string, error) {
	ref := s.Owner + "/" + s.ID
	var files []File
	err := filepath.WalkDir(s.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(s.Dir, p)
		f := File{Name: filepath.ToSlash(rel)}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var done bool
		if f.Compression, f.StoredSize, done, err = l.compressFile(p, info.Size()); err != nil {
			return err
		}
		if done {
			f.Size = info.Size()
		} else if f.Size, err = syncFile(p); err != nil {
			return err
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("commit snapshot %s: %w", ref, err)
	}
	return l.seal(s, scope, files)
}

// seal writes the manifest of staged snapshot s, whose files are durable
// already, and renames it into place.
func (l *Local) seal(s *Staged, scope Scope, files []File) (string, error) {
	ref := s.Owner + "/" + s.ID
	m := Manifest{Ref: ref, CreateTime: time.Now().UTC(), Scope: scope, Files: files}
	data, err := codec.MarshalIndent(m, "", "  ")
	if err != nil {
		return "", err
	}
	if err := WriteFileSync(filepath.Join(s.Dir, ManifestName), data); err != nil {
		return "", fmt.Errorf("commit snapshot %s: %w", ref, err)
	}
	ownerDir := filepath.Join(l.dir, s.Owner)
	if err := os.MkdirAll(ownerDir, 0o700); err != nil {
		return "", err
	}
	if err := os.Rename(s.Dir, filepath.Join(ownerDir, s.ID)); err != nil {
		return "", fmt.Errorf("commit snapshot %s: %w", ref, err)
	}
	if err := syncDir(ownerDir); err != nil {
		return "", fmt.Errorf("commit snapshot %s: %w", ref, err)
	}
	return WithDigest(ref, data), nil
}

// Open checks that ref is complete and its files have the sizes its
// manifest records, and returns its directory and manifest. A snapshot
// without compressed files is read in place (Close is a no-op); one with
// some is inflated into a scratch directory (compressed files
// decompressed, the others hard-linked), which Close removes. Errors wrap
// ErrNotFound or ErrCorrupt.
func (l *Local) Open(_ context.Context, ref string) (*Opened, error) {
	dir, m, err := l.committed(ref)
	if err != nil {
		return nil, err
	}
	if !m.hasCompressed() {
		return &Opened{Dir: dir, Manifest: m}, nil
	}
	scratch, err := l.inflate(dir, ref, m)
	if err != nil {
		return nil, fmt.Errorf("open snapshot %s: %w", ref, err)
	}
	return NewOpened(scratch, m, func() { _ = os.RemoveAll(scratch) }), nil
}

// committed returns the directory and manifest of complete snapshot ref,
// checking that its stored files have the sizes the manifest records.
func (l *Local) committed(ref string) (string, *Manifest, error) {
	dir, err := l.path(ref)
	if err != nil {
		return "", nil, err
	}
	m, _, err := readVerifiedManifest(dir, ref)
	if err != nil {
		return "", nil, err
	}
	for _, f := range m.Files {
		st, err := os.Stat(filepath.Join(dir, filepath.FromSlash(f.storedName())))
		if err != nil || st.Size() != f.storedSize() {
			return "", nil, fmt.Errorf("%w: %s: file %s missing or not %d bytes", ErrCorrupt, ref, f.storedName(), f.storedSize())
		}
	}
	return dir, m, nil
}

// Committed implements Store: the manifest is written last, so its
// presence is the commit.
func (l *Local) Committed(_ context.Context, ref string) (string, error) {
	dir, err := l.path(ref)
	if err != nil {
		return "", err
	}
	_, data, err := readVerifiedManifest(dir, ref)
	if err != nil {
		return "", err
	}
	return WithDigest(Bare(ref), data), nil
}

// ReadManifest reads the manifest in dir, the directory of snapshot ref
// (named in errors). A missing manifest wraps ErrNotFound, an unreadable
// one ErrCorrupt.
func ReadManifest(dir, ref string) (*Manifest, error) {
	m, _, err := readManifest(dir, ref)
	return m, err
}

// readVerifiedManifest is ReadManifest that also checks the manifest
// against the digest ref records (VerifyDigest), and returns its bytes.
func readVerifiedManifest(dir, ref string) (*Manifest, []byte, error) {
	m, data, err := readManifest(dir, ref)
	if err != nil {
		return nil, nil, err
	}
	if err := VerifyDigest(ref, data); err != nil {
		return nil, nil, err
	}
	return m, data, nil
}

func readManifest(dir, ref string) (*Manifest, []byte, error) {
	data, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	if err != nil {
		return nil, nil, err
	}
	m, err := ParseManifest(data, ref)
	return m, data, err
}

// ParseManifest decodes manifest bytes of snapshot ref; a decoding error
// wraps ErrCorrupt.
func ParseManifest(data []byte, ref string) (*Manifest, error) {
	var m Manifest
	if err := codec.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: manifest: %v", ErrCorrupt, ref, err)
	}
	return &m, nil
}

// CheckSizes checks that every file m lists is in dir with its recorded
// size; a mismatch wraps ErrCorrupt.
func CheckSizes(dir, ref string, m *Manifest) error {
	for _, f := range m.Files {
		st, err := os.Stat(filepath.Join(dir, filepath.FromSlash(f.Name)))
		if err != nil || st.Size() != f.Size {
			return fmt.Errorf("%w: %s: file %s missing or not %d bytes", ErrCorrupt, ref, f.Name, f.Size)
		}
	}
	return nil
}

// ClearStaging removes leftovers of staging (a crash between Stage and
// Commit) and of Open's scratch directories (a crash before Close). Call
// it at start-up only, before anything stages or opens a snapshot.
func (l *Local) ClearStaging() error {
	if err := os.RemoveAll(filepath.Join(l.dir, ".open")); err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(l.dir, ".staging")); err != nil {
		return err
	}
	return os.MkdirAll(filepath.Join(l.dir, ".staging"), 0o700)
}

// List returns the reference of every committed snapshot (Local has no
// half-written ones: Commit renames a complete directory into place). It
// only reads, so it may run while snapshots are staged and committed.
func (l *Local) List(context.Context) ([]string, error) {
	owners, err := os.ReadDir(l.dir)
	if err != nil {
		return nil, err
	}
	var refs []string
	for _, o := range owners {
		if !o.IsDir() || strings.HasPrefix(o.Name(), ".") {
			continue
		}
		ids, err := os.ReadDir(filepath.Join(l.dir, o.Name()))
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			refs = append(refs, o.Name()+"/"+id.Name())
		}
	}
	return refs, nil
}

// NewID returns a new snapshot id: the UTC millisecond (idTimeLayout),
// '-', 16 random hex digits.
func NewID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return clock.Now().UTC().Format(idTimeLayout) + "-" + hex.EncodeToString(b[:])
}

// StageID checks Stage's owner and id and returns id, or a new one
// (NewID) when it is empty; for every Store implementation's Stage.
func StageID(owner, id string) (string, error) {
	if err := ValidOwner(owner); err != nil {
		return "", err
	}
	if id == "" {
		return NewID(), nil
	}
	if _, _, ok := idTime(id); !ok || strings.ContainsAny(id, `/\`) {
		return "", fmt.Errorf("invalid snapshot id %q: want NewID's form", id)
	}
	return id, nil
}

// idTimeLayout starts every snapshot id: the UTC millisecond it was
// staged. Ids written before 2026-12-01 record the second only
// (idTimeLayoutSeconds); StageID accepts both.
const (
	idTimeLayout        = "20060102T150405.000Z"
	idTimeLayoutSeconds = "20060102T150405Z"
)

// idTime reads the staging time at the start of a snapshot id, and the
// resolution its layout records.
func idTime(id string) (staged time.Time, resolution time.Duration, ok bool) {
	for _, f := range []struct {
		layout     string
		resolution time.Duration
	}{{idTimeLayout, time.Millisecond}, {idTimeLayoutSeconds, time.Second}} {
		if len(id) < len(f.layout) {
			continue
		}
		if staged, err := time.Parse(f.layout, id[:len(f.layout)]); err == nil {
			return staged, f.resolution, true
		}
	}
	return time.Time{}, 0, false
}

// Import copies the complete snapshot at srcDir (another snapshot store's,
// e.g. a node's paused copy) into this one as a new snapshot of owner and
// returns its reference: the "upload" of a paused snapshot. With scope
// ScopeData only its volumes are copied. On the store's own filesystem
// the files are hard links instead of copies (importLinked).
func (l *Local) Import(ctx context.Context, owner, id, srcDir string, scope Scope) (string, error) {
	if ref, ok, err := l.importLinked(ctx, owner, id, srcDir, scope); ok {
		return ref, err
	}
	return ImportInto(ctx, l, owner, id, srcDir, scope)
}

// ImportInto is Import for any Store: it stages a copy of srcDir (without
// its manifest; with ScopeData only its volumes) and commits it.
func ImportInto(ctx context.Context, s Store, owner, id, srcDir string, scope Scope) (string, error) {
	st, err := s.Stage(owner, id)
	if err != nil {
		return "", err
	}
	outOfScope := outsideScope(scope)
	err = CopyTree(st.Dir, srcDir, func(rel string) bool { return rel == ManifestName || outOfScope(rel) })
	if err == nil {
		var ref string
		if ref, err = s.Commit(ctx, st, scope); err == nil {
			return ref, nil
		}
	}
	_ = s.Abort(st)
	return "", fmt.Errorf("import snapshot from %s: %w", srcDir, err)
}

// Delete removes snapshot ref; deleting a missing one succeeds.
func (l *Local) Delete(_ context.Context, ref string) error {
	dir, err := l.path(ref)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", ref, err)
	}
	return nil
}

// DeleteOwner removes every snapshot of owner.
func (l *Local) DeleteOwner(_ context.Context, owner string) error {
	if err := ValidOwner(owner); err != nil {
		return err
	}
	return os.RemoveAll(filepath.Join(l.dir, owner))
}

// ValidOwner rejects owners that are not one plain directory name (nor
// one object-key segment).
func ValidOwner(owner string) error {
	if owner == "" || strings.ContainsAny(owner, `/\`) || owner[0] == '.' {
		return fmt.Errorf("invalid snapshot owner %q", owner)
	}
	return nil
}

func (l *Local) path(ref string) (string, error) {
	owner, id, err := SplitRef(ref)
	if err != nil {
		return "", err
	}
	return filepath.Join(l.dir, owner, id), nil
}

// SplitRef splits "<owner>/<id>", with or without its digest
// ("@sha256:…", ParseRef), into owner and id; anything else (empty
// parts, more slashes, a leading dot, a malformed digest) is an error
// wrapping ErrNotFound.
func SplitRef(ref string) (owner, id string, err error) {
	bare, _, err := ParseRef(ref)
	if err != nil {
		return "", "", err
	}
	return splitBare(bare)
}

// splitBare is SplitRef for a reference without a digest.
func splitBare(ref string) (owner, id string, err error) {
	owner, id, ok := strings.Cut(ref, "/")
	if !ok || owner == "" || id == "" || strings.ContainsAny(id, `/\`) || strings.ContainsRune(owner, '\\') || owner[0] == '.' || id[0] == '.' {
		return "", "", fmt.Errorf("%w: malformed reference %q", ErrNotFound, ref)
	}
	return owner, id, nil
}

func syncFile(p string) (int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), f.Sync()
}

// WriteFileSync writes data to a new file p (mode 0600, replacing any)
// and fsyncs it before returning: a manifest must be on disk before the
// snapshot it describes counts as complete.
func WriteFileSync(p string, data []byte) error {
	return writeFileSyncMode(p, data, 0o600)
}

// writeFileSyncMode is WriteFileSync with the new file's permission bits.
func writeFileSyncMode(p string, data []byte, perm fs.FileMode) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
