package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"substrate.dev/ate/internal/snapshot"
)

// DefaultOrphanInterval is OrphanCollection.Interval's default.
const DefaultOrphanInterval = 30 * time.Second

// orphanMargin is added to a node's checkpoint bound to make the orphan
// window: a node that finished a checkpoint whose caller died uploads
// its manifest only then.
const orphanMargin = time.Minute

// OrphanCollection says which unreferenced snapshots CollectOrphans may
// take, and for how long it looks for them.
//
// No clock is compared with another: snapshot ids carry the time of the
// clock that minted them (snapshot.NewID), and replicas' clocks need not
// agree, nor stay still. The snapshots this process minted are never
// taken (minted); every other unreferenced one belongs to a workflow of
// a dead process — alone over the store — or, over a shared store,
// possibly to another replica's workflow still under way, so there it is
// taken only once it has stayed unreferenced for the window, measured on
// this process's monotonic clock.
type OrphanCollection struct {
	// Shared says other API servers' workflows run over the store.
	Shared bool
	// CheckpointTimeout bounds a node's checkpoint once begun
	// (nodeagent.CheckpointTimeout). With orphanMargin it makes the
	// window after the start in which a dead workflow's snapshot may
	// still appear, and over a shared store how long a snapshot must
	// stay unreferenced to be an orphan.
	CheckpointTimeout time.Duration
	// Interval is how often it collects within the window; default
	// DefaultOrphanInterval.
	Interval time.Duration
	// FirstPassDone, if set, is called once the first pass has ended,
	// whether or not it took anything: that pass reads every actor, so
	// benchmarks wait for it before timing anything.
	FirstPassDone func()

	// margin replaces orphanMargin (tests).
	margin time.Duration
}

// window is how long after a dead workflow's end its snapshot may still
// appear, and how long a live one may take to record its snapshot.
func (o OrphanCollection) window() time.Duration {
	if o.margin > 0 {
		return o.CheckpointTimeout + o.margin
	}
	return o.CheckpointTimeout + orphanMargin
}

// CollectOrphans deletes the unreferenced snapshots of dead workflows:
// at once, and every o.Interval until the window has passed since it
// began (nodes may still be finishing such snapshots); over a shared
// store, each once it has stayed unreferenced for the window, and it
// goes on until the last it found has. The snapshots this process's
// workflows stage are theirs to record or drop. Failures are logged; the
// next pass or start retries. It returns nil when done or when ctx ends,
// and ends the manager's record of the ids it minted (minted): call it
// once.
func (m *Manager) CollectOrphans(ctx context.Context, o OrphanCollection) error {
	defer m.minted.stop()
	interval := o.Interval
	if interval <= 0 {
		interval = DefaultOrphanInterval
	}
	began := time.Now()
	// unreferencedSince is, over a shared store, when each snapshot was
	// first found unreferenced (monotonic readings of this process).
	unreferencedSince := map[string]time.Time{}
	for {
		var err error
		if o.Shared {
			err = m.collectShared(ctx, unreferencedSince, time.Since(began) <= o.window(), o.window())
		} else {
			err = m.CollectGarbage(ctx)
		}
		if err != nil && ctx.Err() == nil {
			m.log.Warn("snapshot garbage collection", "err", err)
		}
		if o.FirstPassDone != nil {
			o.FirstPassDone()
			o.FirstPassDone = nil
		}
		if time.Since(began) > o.window() && len(unreferencedSince) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// collectShared is one pass over a shared store: it deletes the
// snapshots found unreferenced at least window ago and still so, forgets
// those referenced since, and notes the new ones while looking (within
// the first window).
func (m *Manager) collectShared(ctx context.Context, since map[string]time.Time, looking bool, window time.Duration) error {
	refs, err := m.unreferenced(ctx)
	if err != nil {
		return err
	}
	now := make(map[string]bool, len(refs))
	for _, ref := range refs {
		now[ref] = true
		first, seen := since[ref]
		switch {
		case !seen && looking:
			since[ref] = time.Now()
		case seen && time.Since(first) >= window:
			if err := m.deleteOrphan(ctx, ref); err != nil {
				return err
			}
			delete(since, ref)
		}
	}
	for ref := range since {
		if !now[ref] {
			delete(since, ref) // recorded meanwhile: a live workflow's
		}
	}
	return nil
}

// CollectGarbage deletes every durable snapshot that no actor, template
// or tag points to and that this process did not mint (minted):
// leftovers of a dead process's crash between a commit and the pointer
// move, or between the pointer move and the old snapshot's deletion. For
// the only API server over its store (`ate up`, one `ate apiserver`
// over bolt); over a shared store CollectOrphans waits out other
// replicas' workflows. It pages through every actor (BENCHMARKS.md,
// Control plane: Stored actors).
func (m *Manager) CollectGarbage(ctx context.Context) error {
	refs, err := m.unreferenced(ctx)
	if err != nil {
		return err
	}
	for _, ref := range refs {
		if err := m.deleteOrphan(ctx, ref); err != nil {
			return err
		}
	}
	return nil
}

func (m *Manager) deleteOrphan(ctx context.Context, ref string) error {
	m.log.InfoContext(ctx, "deleting unreferenced snapshot", "snapshot", ref)
	if err := m.snaps.Delete(ctx, ref); err != nil && !errors.Is(err, snapshot.ErrNotFound) {
		return err
	}
	return nil
}

// unreferenced lists the durable snapshots no template, tag or actor
// points to, but those this process minted.
func (m *Manager) unreferenced(ctx context.Context) ([]string, error) {
	if !m.minted.tracking() {
		return nil, errMintedForgotten
	}
	live := map[string]bool{}
	tpls, err := m.store.ListTemplates(ctx, "")
	if err != nil {
		return nil, err
	}
	// Records keep references with their digests; List returns them bare.
	for _, t := range tpls {
		live[snapshot.Bare(t.GoldenSnapshot)] = true
	}
	tags, err := m.store.ListTags(ctx, "")
	if err != nil {
		return nil, err
	}
	for _, t := range tags {
		live[snapshot.Bare(t.Snapshot)] = true
	}
	for token := ""; ; {
		page, next, err := m.store.ListActors(ctx, "", 1000, token)
		if err != nil {
			return nil, err
		}
		for _, a := range page {
			live[snapshot.Bare(a.Snapshot)] = true
			// An interrupted suspend's snapshot, once committed, is
			// the next workflow's to adopt (adoptPending).
			if a.PendingSnapshot != "" {
				live[snapshot.Bare(a.PendingSnapshot)] = true
			}
		}
		if next == "" {
			break
		}
		token = next
	}
	refs, err := m.snaps.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ref := range refs {
		if !live[ref] && !m.minted.has(ref) {
			out = append(out, ref)
		}
	}
	return out, nil
}

// errMintedForgotten: the collection ran after the manager stopped
// recording the ids it mints, so it could take one of its own.
var errMintedForgotten = fmt.Errorf("snapshot collection after the start-up collection ended: this process's own snapshots are no longer known")

// mintedIDs records the snapshot ids a manager mints (newSnapshotID)
// from its creation until its start-up collection ends: the collection
// never takes them, whatever any clock says.
type mintedIDs struct {
	mu      sync.Mutex
	stopped bool
	ids     map[string]bool
}

func (s *mintedIDs) add(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	if s.ids == nil {
		s.ids = map[string]bool{}
	}
	s.ids[id] = true
}

// has reports whether ref ("<owner>/<id>") has an id minted here.
func (s *mintedIDs) has(ref string) bool {
	_, id, _ := strings.Cut(snapshot.Bare(ref), "/")
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[id]
}

func (s *mintedIDs) tracking() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.stopped
}

func (s *mintedIDs) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped, s.ids = true, nil
}

// ForgetMinted ends the record of the snapshot ids minted here, for a
// process whose start-up collection is one CollectGarbage (`ate up`):
// later collections fail instead of taking the process's own snapshots.
func (m *Manager) ForgetMinted() { m.minted.stop() }

// newSnapshotID mints a snapshot id (snapshot.NewID) for one of the
// manager's workflows and records it (minted).
func (m *Manager) newSnapshotID() string {
	id := snapshot.NewID()
	m.minted.add(id)
	return id
}
