// Package snapshot is the snapshot store: where checkpoints live between a
// suspend and the next resume. Local is a directory (the default, under the
// data dir). A snapshot is complete only once its manifest is written, and
// it becomes visible under its final name only then, so a crash mid-write
// never leaves a snapshot that looks usable.
//
// Layout: <dir>/<owner>/<id>/{files…, manifest.json}; staging happens in
// <dir>/.staging/<id>/ and is renamed into place on Commit.
package snapshot

import (
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

// File is one file of a snapshot, with its size in bytes.
type File struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
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
}

// Local is a snapshot store in a local directory. Safe for concurrent use:
// every snapshot has its own directory and ids are random.
type Local struct {
	dir string
}

// NewLocal returns a snapshot store rooted at dir, creating it.
func NewLocal(dir string) (*Local, error) {
	if err := os.MkdirAll(filepath.Join(dir, ".staging"), 0o700); err != nil {
		return nil, fmt.Errorf("snapshot store %s: %w", dir, err)
	}
	return &Local{dir: dir}, nil
}

// Staged is a snapshot being written; write its files into Dir, then
// Commit or Abort it.
type Staged struct {
	Owner, ID, Dir string
}

// Stage creates an empty staging directory for a new snapshot of owner (an
// actor or template uid; a DNS-1123 label or uid, never containing '/').
func (l *Local) Stage(owner string) (*Staged, error) {
	if err := validOwner(owner); err != nil {
		return nil, err
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := time.Now().UTC().Format(idTimeLayout) + "-" + hex.EncodeToString(b[:])
	dir := filepath.Join(l.dir, ".staging", id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("stage snapshot: %w", err)
	}
	return &Staged{Owner: owner, ID: id, Dir: dir}, nil
}

// Abort removes a staged snapshot.
func (l *Local) Abort(s *Staged) error { return os.RemoveAll(s.Dir) }

// Commit makes every staged file durable, writes the manifest last, and
// moves the snapshot to its final place. It returns the reference to store
// in the actor's record; only after Commit returns may the pointer move.
func (l *Local) Commit(s *Staged, scope Scope) (string, error) {
	ref := s.Owner + "/" + s.ID
	m := Manifest{Ref: ref, CreateTime: time.Now().UTC(), Scope: scope}
	err := filepath.WalkDir(s.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		size, err := syncFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(s.Dir, p)
		m.Files = append(m.Files, File{Name: filepath.ToSlash(rel), Size: size})
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("commit snapshot %s: %w", ref, err)
	}
	data, err := codec.MarshalIndent(m, "", "  ")
	if err != nil {
		return "", err
	}
	if err := writeSync(filepath.Join(s.Dir, ManifestName), data); err != nil {
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
	return ref, nil
}

// Open checks that ref is complete and its files have the sizes its
// manifest records, and returns its directory and manifest. Errors wrap
// ErrNotFound or ErrCorrupt.
func (l *Local) Open(ref string) (string, *Manifest, error) {
	dir, err := l.path(ref)
	if err != nil {
		return "", nil, err
	}
	data, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	if err != nil {
		return "", nil, err
	}
	var m Manifest
	if err := codec.Unmarshal(data, &m); err != nil {
		return "", nil, fmt.Errorf("%w: %s: manifest: %v", ErrCorrupt, ref, err)
	}
	for _, f := range m.Files {
		st, err := os.Stat(filepath.Join(dir, filepath.FromSlash(f.Name)))
		if err != nil || st.Size() != f.Size {
			return "", nil, fmt.Errorf("%w: %s: file %s missing or not %d bytes", ErrCorrupt, ref, f.Name, f.Size)
		}
	}
	return dir, &m, nil
}

// ClearStaging removes leftovers of staging (a crash between Stage and
// Commit). Call it at start-up only, before anything stages a snapshot.
func (l *Local) ClearStaging() error {
	if err := os.RemoveAll(filepath.Join(l.dir, ".staging")); err != nil {
		return err
	}
	return os.MkdirAll(filepath.Join(l.dir, ".staging"), 0o700)
}

// List returns the reference of every committed snapshot. It only reads,
// so it may run while snapshots are staged and committed.
func (l *Local) List() ([]string, error) {
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

// idTimeLayout starts every snapshot id: the UTC second it was staged.
const idTimeLayout = "20060102T150405Z"

// StagedBefore reports whether ref was staged (hence committed) before t,
// to the second, as its id records; false for a ref whose id records no
// time.
func StagedBefore(ref string, t time.Time) bool {
	_, id, ok := strings.Cut(ref, "/")
	if !ok || len(id) < len(idTimeLayout) {
		return false
	}
	staged, err := time.Parse(idTimeLayout, id[:len(idTimeLayout)])
	return err == nil && staged.Before(t.UTC().Truncate(time.Second))
}

// Import copies the complete snapshot at srcDir (another snapshot store's,
// e.g. a node's paused copy) into this one as a new snapshot of owner and
// returns its reference: the "upload" of a paused snapshot. With scope
// ScopeData only its volumes are copied.
func (l *Local) Import(owner, srcDir string, scope Scope) (string, error) {
	st, err := l.Stage(owner)
	if err != nil {
		return "", err
	}
	err = CopyTree(st.Dir, srcDir, func(rel string) bool {
		inVolumes := rel == VolumesDir || strings.HasPrefix(rel, VolumesDir+"/")
		return rel == ManifestName || (scope == ScopeData && !inVolumes)
	})
	if err == nil {
		var ref string
		if ref, err = l.Commit(st, scope); err == nil {
			return ref, nil
		}
	}
	_ = l.Abort(st)
	return "", fmt.Errorf("import snapshot from %s: %w", srcDir, err)
}

// Delete removes snapshot ref; deleting a missing one succeeds.
func (l *Local) Delete(ref string) error {
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
func (l *Local) DeleteOwner(owner string) error {
	if err := validOwner(owner); err != nil {
		return err
	}
	return os.RemoveAll(filepath.Join(l.dir, owner))
}

// validOwner rejects owners that are not one plain directory name.
func validOwner(owner string) error {
	if owner == "" || strings.ContainsAny(owner, `/\`) || owner[0] == '.' {
		return fmt.Errorf("invalid snapshot owner %q", owner)
	}
	return nil
}

func (l *Local) path(ref string) (string, error) {
	owner, id, ok := strings.Cut(ref, "/")
	if !ok || owner == "" || id == "" || strings.ContainsAny(id, `/\`) || owner[0] == '.' || id[0] == '.' {
		return "", fmt.Errorf("%w: malformed reference %q", ErrNotFound, ref)
	}
	return filepath.Join(l.dir, owner, id), nil
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

func writeSync(p string, data []byte) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
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
