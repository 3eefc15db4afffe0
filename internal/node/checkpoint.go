package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"substrate.dev/ate/internal/metrics"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/tracing"
)

// DefaultDrainGrace is how long in-flight requests may run before a
// checkpoint cuts them off, when the template sets none.
const DefaultDrainGrace = 10 * time.Second

// Checkpoint drains the worker (new requests are refused with 421 so the
// router holds them; in-flight ones get up to opts.Grace), writes a
// snapshot of the actor and empties the worker. It returns the committed
// snapshot's reference. Errors wrap ErrStale when actorUID is not hosted
// there; on any error the worker is emptied too, since a failed checkpoint
// may have stopped the sandbox. Where it can, the worker's next standby is
// created while the checkpoint runs (prepareBeside: the container is
// frozen first), and Checkpoint returns once both have ended, so the
// start that follows finds it.
func (n *Node) Checkpoint(ctx context.Context, worker, actorUID string, opts CheckpointOptions) (string, error) {
	s, err := n.slot(worker)
	if err != nil {
		return "", err
	}
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if err := n.admitFence(ctx, worker, actorUID); err != nil {
		return "", err
	}
	// A pause asked again under an id this node committed: the pause
	// finished here and its answer, or the record of it, was lost. Its
	// checkpoint is the answer; nothing is touched (the worker may host
	// the actor again by now, or another).
	if opts.Paused && opts.ID != "" {
		if ref, err := n.cfg.Paused.Committed(ctx, actorUID+"/"+opts.ID); err == nil {
			return ref, nil
		}
	}
	if !s.gate.hosts(actorUID) {
		return "", fmt.Errorf("checkpoint %s on %s: %w", actorUID, worker, ErrStale)
	}
	// Snapshot ids are minted once per checkpoint: one already committed
	// is a repeated request (a first call delayed in the network, arriving
	// after the control plane asked again under the same id and the actor
	// was resumed here). Writing it again would overwrite the snapshot
	// the actor's record names, and stop the sandbox it now runs in. The
	// snapshot may be gone by then (a resume deletes a paused checkpoint,
	// a later suspend the snapshot before it): the ids this process
	// committed are remembered too.
	if opts.ID != "" {
		ref := cmp.Or(opts.Owner, actorUID) + "/" + opts.ID
		if n.committedIDs.has(opts.ID) {
			return "", fmt.Errorf("checkpoint %s on %s: %s was committed here before (a repeated request): %w", actorUID, worker, ref, ErrStale)
		}
		// A suspend's snapshot may have been committed by an earlier
		// process of this node; a pause's is on this node's disk, looked
		// up above.
		if !opts.Paused {
			if _, err := n.cfg.Snapshots.Committed(ctx, ref); err == nil {
				return "", fmt.Errorf("checkpoint %s on %s: snapshot %s is already committed (a repeated request): %w", actorUID, worker, ref, ErrStale)
			}
		}
	}
	if opts.LeaveRunning {
		return n.checkpointLive(ctx, s, actorUID, opts)
	}
	// An exec'd process must not enter the snapshot, nor hold it up.
	n.endExecs(s)
	n.drain(ctx, s, opts.Grace)
	ctx, span := tracing.Span(ctx, "node.checkpoint", attribute.String("ate.worker", worker), attribute.Bool("ate.paused", opts.Paused))
	began := time.Now()
	beside := n.prepareBeside(ctx, s, opts)
	ref, err := n.checkpointOp(ctx, s, actorUID, opts)
	switch {
	case err != nil:
		s.stopWhy = "checkpoint failed: " + err.Error()
	case opts.Paused:
		s.stopWhy = "paused"
	default:
		s.stopWhy = "suspended"
	}
	n.cfg.Metrics.Checkpoint(time.Since(began), err)
	// Before clearOp, whose destroy of a container a failed checkpoint
	// left would otherwise run beside the preparation; within the span,
	// which then shows a create that outlasted the checkpoint.
	beside.wait()
	tracing.End(span, err)
	if err == nil && opts.ID != "" {
		n.committedIDs.add(opts.ID)
	}
	n.clearOp(ctx, s)
	n.recordBeside(ctx, s, beside)
	n.refill(s)
	return ref, err
}

// drain stops admitting requests and waits until in-flight ones end or
// grace passes; whatever is still running is cut off by the checkpoint.
func (n *Node) drain(ctx context.Context, s *slot, grace time.Duration) {
	if grace <= 0 {
		grace = DefaultDrainGrace
	}
	if s.gate.drain(ctx, grace) {
		n.log.WarnContext(ctx, "drain grace over, cutting requests off", "worker", s.name, "grace", grace)
	}
}

// checkpointOp writes s's container into a new snapshot. s.opMu is held.
func (n *Node) checkpointOp(ctx context.Context, s *slot, owner string, opts CheckpointOptions) (string, error) {
	store := n.cfg.Snapshots
	if opts.Paused {
		store = n.cfg.Paused
	}
	st, err := store.Stage(owner, opts.ID)
	if err != nil {
		return "", err
	}
	id, vols := s.stop()
	if opts.Scope == snapshot.ScopeData {
		// Volumes only: the container just stops.
		n.destroy(ctx, s, id)
	} else {
		if err := n.cfg.Runtime.Checkpoint(ctx, s.sb, id, st.Dir); err != nil {
			_ = store.Abort(st)
			return "", fmt.Errorf("checkpoint: %w", err)
		}
		n.containerGone(id)
	}
	// The container is gone (a checkpoint deletes it), so the clearOp
	// that follows need not destroy it again.
	s.gone()
	s.gate.containerGone()
	// The container has stopped, so the volumes are quiescent.
	for _, v := range vols {
		if err := n.copyVolumeOut(st.Dir, v); err != nil {
			_ = store.Abort(st)
			return "", err
		}
	}
	if n.cfg.Metrics != nil {
		n.cfg.Metrics.SnapshotBytes(metrics.BytesWritten, snapshot.TreeSize(st.Dir))
	}
	ref, err := n.commitRetrying(ctx, store, st, opts.Scope)
	if err != nil {
		_ = store.Abort(st)
		return "", err
	}
	return ref, nil
}

// Bounds of commitRetrying's waits between tries.
const (
	commitRetryFirst = 200 * time.Millisecond
	commitRetryMax   = 5 * time.Second
)

// commitRetrying commits st, trying again while the store fails and ctx
// lasts (CheckpointTimeout, from the node agent). The container is gone
// by now, so st holds the only copy of the actor's memory since its last
// snapshot: giving up at the first failure left the actor CRASHED at that
// snapshot, losing what it had answered since — seen in the chaos run
// when the object store answered 503 SlowDown for a few seconds.
func (n *Node) commitRetrying(ctx context.Context, store snapshot.Store, st *snapshot.Staged, scope snapshot.Scope) (string, error) {
	wait := commitRetryFirst
	for {
		ref, err := store.Commit(ctx, st, scope)
		if err == nil || ctx.Err() != nil {
			return ref, err
		}
		n.log.WarnContext(ctx, "committing a checkpoint failed; trying again", "snapshot", st.Owner+"/"+st.ID, "in", wait, "err", err)
		// A failed commit may have written the manifest into the staged
		// directory, which a commit refuses to find there.
		if rerr := os.Remove(filepath.Join(st.Dir, snapshot.ManifestName)); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return "", errors.Join(err, rerr)
		}
		select {
		case <-ctx.Done():
			return "", err
		case <-time.After(wait):
		}
		wait = min(2*wait, commitRetryMax)
	}
}

// Upload copies a paused checkpoint into the durable snapshot store and
// returns the new durable reference; scope Data uploads only the volumes
// (a template's onSuspend may hold less than its onPause). The paused
// copy stays until DeletePaused. id names the new snapshot as
// CheckpointOptions.ID does.
func (n *Node) Upload(ctx context.Context, pausedRef, owner, id string, scope snapshot.Scope) (string, error) {
	o, err := n.cfg.Paused.Open(ctx, pausedRef)
	if err != nil {
		return "", err
	}
	defer o.Close()
	if o.Manifest.Scope == snapshot.ScopeData {
		scope = snapshot.ScopeData
	}
	return n.cfg.Snapshots.Import(ctx, owner, id, o.Dir, scope)
}

// DeletePaused removes a paused checkpoint from this node's disk.
func (n *Node) DeletePaused(ref string) error {
	return n.cfg.Paused.Delete(context.Background(), ref)
}

// ForgetActor removes an actor's paused checkpoints from this node after
// it was deleted. Its volumes were the worker's (prepareVolumes) and were
// emptied when its container stopped (clearOp); its identity files stay
// until the next start there rewrites them.
func (n *Node) ForgetActor(actorUID string) {
	_ = n.cfg.Paused.DeleteOwner(context.Background(), actorUID)
	if n.actorLogs != nil {
		n.actorLogs.Forget(actorUID)
	}
}

// copyVolumeOut copies volume v into the snapshot staged at stageDir,
// within the node's VolumeLimits: what an actor keeps in its volume
// costs the node's disk and the snapshot store, so one actor may not
// fill them.
func (n *Node) copyVolumeOut(stageDir string, v volume) error {
	err := snapshot.CopyTreeWithin(filepath.Join(stageDir, snapshot.VolumesDir, v.name), v.hostDir, n.cfg.VolumeLimits)
	if errors.Is(err, snapshot.ErrTooLarge) {
		return fmt.Errorf("volume %s exceeds what this node keeps (--max-volume-bytes %d, --max-volume-entries %d, at most %d directory levels and %d-byte paths): %w",
			v.name, n.cfg.VolumeLimits.Bytes, n.cfg.VolumeLimits.Entries, snapshot.MaxTreeDepth, snapshot.MaxTreePathBytes, err)
	}
	if err != nil {
		return fmt.Errorf("copy volume %s: %w", v.name, err)
	}
	return nil
}

// recentIDs remembers the last recentIDsKept checkpoint ids this node
// committed, for Checkpoint's refusal of a repeated request. Safe for
// concurrent use; the zero value is ready.
type recentIDs struct{ ids firstSeen[struct{}] }

// recentIDsKept bounds recentIDs: a repeated request comes within a
// lease or two of the first, and a node commits far fewer checkpoints
// than this in that time.
const recentIDsKept = 4096

func (r *recentIDs) add(id string) {
	_ = r.ids.update(id, recentIDsKept, func(struct{}, bool) (struct{}, error) { return struct{}{}, nil })
}

func (r *recentIDs) has(id string) bool {
	_, ok := r.ids.get(id)
	return ok
}

// firstSeen is a map that keeps the keys seen last, at most a bound of
// them, forgetting the one first seen longest ago. Safe for concurrent
// use; the zero value is ready.
type firstSeen[V any] struct {
	mu   sync.Mutex
	m    map[string]V
	ring []string
	next int
}

func (f *firstSeen[V]) get(key string) (V, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.m[key]
	return v, ok
}

// update sets key's value to what next returns for its current one (ok
// false when it has none), unless next fails, all under the lock; a new
// key makes room by forgetting the one first seen longest ago of the
// last keep.
func (f *firstSeen[V]) update(key string, keep int, next func(cur V, ok bool) (V, error)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m, f.ring = make(map[string]V, keep), make([]string, keep)
	}
	cur, ok := f.m[key]
	v, err := next(cur, ok)
	if err != nil {
		return err
	}
	if !ok {
		if old := f.ring[f.next]; old != "" {
			delete(f.m, old)
		}
		f.ring[f.next] = key
		f.next = (f.next + 1) % keep
	}
	f.m[key] = v
	return nil
}
