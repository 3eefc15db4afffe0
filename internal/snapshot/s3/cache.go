package s3

import (
	"container/list"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"substrate.dev/ate/internal/snapshot"
)

// Cache layout under Config.CacheDir:
//
//	<owner>/<id>/{files…, manifest.json}   complete, verified entries
//	.staging/<id>/                          Stage's directories
//	.fetch/<random>/                        downloads in progress
//	.trash/<random>/                        evicted entries being removed
//
// Everything is on one filesystem, so a commit or a finished download
// enters the cache by rename, and eviction leaves it by rename (then a
// removal outside the lock).
const (
	stagingDir = ".staging"
	fetchDir   = ".fetch"
	trashDir   = ".trash"
)

// cache is the node-local, byte-bounded LRU of complete snapshots. Safe
// for concurrent use. An entry handed out by acquire is pinned until its
// release and is never evicted or removed while pinned; removing a pinned
// entry (Delete) hides it from acquire at once and deletes its directory
// at the last release.
type cache struct {
	dir string
	max int64

	mu      sync.Mutex // guards entries, lru, size and every entry's fields
	entries map[string]*entry
	lru     *list.List // of *entry; front = most recently used
	size    int64      // sum of entry sizes, pinned ones included
}

type entry struct {
	ref string
	dir string
	// digest is the manifest's (snapshot.ManifestDigest): Open hands the
	// entry out only for a reference recording the same one.
	digest string
	m      *snapshot.Manifest
	size   int64
	pins   int
	doomed bool // removed from entries; delete dir at the last release
	elem   *list.Element
}

// newCache opens the cache at dir, rebuilding its index from the entries
// on disk (least recently used by manifest mtime, which acquire touches).
// Leftover downloads and trash are removed, and entries that fail a size
// check (a crash mid-write) are dropped.
func newCache(dir string, max int64) (*cache, error) {
	for _, d := range []string{fetchDir, trashDir} {
		if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
			return nil, fmt.Errorf("snapshot cache %s: %w", dir, err)
		}
	}
	for _, d := range []string{stagingDir, fetchDir, trashDir} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("snapshot cache %s: %w", dir, err)
		}
	}
	c := &cache{dir: dir, max: max, entries: map[string]*entry{}, lru: list.New()}
	type found struct {
		e     *entry
		mtime time.Time
	}
	var all []found
	owners, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("snapshot cache %s: %w", dir, err)
	}
	for _, o := range owners {
		if !o.IsDir() || strings.HasPrefix(o.Name(), ".") {
			continue
		}
		ids, err := os.ReadDir(filepath.Join(dir, o.Name()))
		if err != nil {
			return nil, fmt.Errorf("snapshot cache %s: %w", dir, err)
		}
		for _, id := range ids {
			ref, p := o.Name()+"/"+id.Name(), filepath.Join(dir, o.Name(), id.Name())
			data, err := os.ReadFile(filepath.Join(p, snapshot.ManifestName))
			var m *snapshot.Manifest
			if err == nil {
				m, err = snapshot.ParseManifest(data, ref)
			}
			if err == nil {
				err = snapshot.CheckSizes(p, ref, m)
			}
			if err != nil {
				_ = os.RemoveAll(p) // not a usable entry; the object store still has it
				continue
			}
			st, err := os.Stat(filepath.Join(p, snapshot.ManifestName))
			if err != nil {
				return nil, err
			}
			e := &entry{ref: ref, dir: p, digest: snapshot.ManifestDigest(data), m: m, size: manifestBytes(m)}
			all = append(all, found{e, st.ModTime()})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].mtime.Before(all[j].mtime) })
	for _, f := range all {
		f.e.elem = c.lru.PushFront(f.e)
		c.entries[f.e.ref] = f.e
		c.size += f.e.size
	}
	c.mu.Lock()
	victims := c.evictLocked()
	c.mu.Unlock()
	removeAll(victims)
	return c, nil
}

// manifestBytes is what an entry counts against the bound.
func manifestBytes(m *snapshot.Manifest) int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// acquire pins ref's entry and returns it opened, with its manifest's
// digest, or nil if it is not cached. The caller must Close the result.
func (c *cache) acquire(ref string) (*snapshot.Opened, string) {
	c.mu.Lock()
	e, ok := c.entries[ref]
	if !ok {
		c.mu.Unlock()
		return nil, ""
	}
	e.pins++
	c.lru.MoveToFront(e.elem)
	c.mu.Unlock()
	// Persist recency for the index rebuilt at the next start; best effort.
	now := time.Now()
	_ = os.Chtimes(filepath.Join(e.dir, snapshot.ManifestName), now, now)
	return snapshot.NewOpened(e.dir, e.m, func() { c.release(e) }), e.digest
}

func (c *cache) release(e *entry) {
	c.mu.Lock()
	e.pins--
	var victims []string
	if e.doomed && e.pins == 0 {
		victims = c.trashLocked(e.dir)
	} else {
		// A pinned entry may have held the cache over its bound.
		victims = c.evictLocked()
	}
	c.mu.Unlock()
	removeAll(victims)
}

// insert moves the complete snapshot directory src (on the cache's
// filesystem, manifest included, whose digest is digest) into the cache
// as ref. With pin it returns the entry opened (the caller must Close
// it); a concurrent insert of the same ref wins and src is discarded, and
// the winner is returned only if its manifest has the same digest.
func (c *cache) insert(ref, digest, src string, m *snapshot.Manifest, pin bool) (*snapshot.Opened, error) {
	owner, id, err := snapshot.SplitRef(ref)
	if err != nil {
		return nil, err
	}
	dst := filepath.Join(c.dir, owner, id)
	c.mu.Lock()
	if _, ok := c.entries[ref]; ok {
		c.mu.Unlock()
		_ = os.RemoveAll(src)
		if !pin {
			return nil, nil
		}
		if o, got := c.acquire(ref); o != nil {
			if got != digest {
				o.Close()
				return nil, fmt.Errorf("%w: %s: this node's cached copy has manifest digest %s, not %s", snapshot.ErrCorrupt, ref, got, digest)
			}
			return o, nil
		}
		return nil, fmt.Errorf("snapshot cache: %s evicted while inserted", ref)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("snapshot cache: %w", err)
	}
	if err := os.Rename(src, dst); err != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("snapshot cache: %w", err)
	}
	e := &entry{ref: ref, dir: dst, digest: digest, m: m, size: manifestBytes(m)}
	if pin {
		e.pins = 1
	}
	e.elem = c.lru.PushFront(e)
	c.entries[ref] = e
	c.size += e.size
	victims := c.evictLocked()
	c.mu.Unlock()
	removeAll(victims)
	if !pin {
		return nil, nil
	}
	return snapshot.NewOpened(e.dir, e.m, func() { c.release(e) }), nil
}

// remove drops every entry whose ref has the given prefix ("owner/id" for
// one ref, "owner/" for an owner).
func (c *cache) remove(prefix string) {
	c.mu.Lock()
	var victims []string
	for ref, e := range c.entries {
		if ref != prefix && !(strings.HasSuffix(prefix, "/") && strings.HasPrefix(ref, prefix)) {
			continue
		}
		c.unlinkLocked(e)
		if e.pins > 0 {
			e.doomed = true
			continue
		}
		victims = append(victims, c.trashLocked(e.dir)...)
	}
	c.mu.Unlock()
	removeAll(victims)
}

// evictLocked unlinks least recently used unpinned entries until the
// cache fits its bound, and returns their trash paths to remove once
// c.mu is released.
func (c *cache) evictLocked() []string {
	var victims []string
	for el := c.lru.Back(); el != nil && c.size > c.max; {
		e := el.Value.(*entry)
		el = el.Prev()
		if e.pins > 0 {
			continue
		}
		c.unlinkLocked(e)
		victims = append(victims, c.trashLocked(e.dir)...)
	}
	return victims
}

func (c *cache) unlinkLocked(e *entry) {
	delete(c.entries, e.ref)
	c.lru.Remove(e.elem)
	c.size -= e.size
}

// trashLocked renames dir into the trash, so the entry's path is free at
// once (a new download of the same ref can take it) while the slow removal
// happens outside the lock.
func (c *cache) trashLocked(dir string) []string {
	t, err := os.MkdirTemp(filepath.Join(c.dir, trashDir), "")
	if err == nil {
		if err = os.Rename(dir, filepath.Join(t, "e")); err == nil {
			return []string{t}
		}
	}
	return []string{dir} // remove in place: the entry is already unlinked
}

func removeAll(paths []string) {
	for _, p := range paths {
		_ = os.RemoveAll(p)
	}
}

// stats returns the cache's content in bytes and its number of entries.
func (c *cache) stats() (bytes int64, entries int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size, len(c.entries)
}

// clearStaging empties .staging.
func (c *cache) clearStaging() error {
	p := filepath.Join(c.dir, stagingDir)
	if err := os.RemoveAll(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.MkdirAll(p, 0o700)
}
