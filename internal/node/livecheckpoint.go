package node

import (
	"context"
	"errors"
	"fmt"

	"substrate.dev/ate/internal/sandbox"
	"substrate.dev/ate/internal/snapshot"
)

// ErrNoLiveCheckpoint: the sandbox class cannot checkpoint a container
// without stopping it (sandbox.LiveCheckpointer).
var ErrNoLiveCheckpoint = errors.New("the sandbox class cannot checkpoint a running actor without stopping it")

// checkpointLive writes a durable snapshot of s's running actor, owned by
// opts.Owner (or actorUID), and leaves the actor running: the sandbox is
// frozen while its memory is written (runsc checkpoint --leave-running),
// then its volumes are copied as they are while it runs on, so a write to
// a volume in the moment after the freeze may be in the copy. Requests are
// not drained: they stall for the freeze and carry on. s.opMu is held.
func (n *Node) checkpointLive(ctx context.Context, s *slot, actorUID string, opts CheckpointOptions) (string, error) {
	if opts.Paused {
		return "", fmt.Errorf("checkpoint %s: a checkpoint that leaves the actor running goes to the durable store, not the paused one", actorUID)
	}
	live, ok := n.cfg.Runtime.(sandbox.LiveCheckpointer)
	if !ok {
		return "", ErrNoLiveCheckpoint
	}
	owner := opts.Owner
	if owner == "" {
		owner = actorUID
	}
	s.mu.Lock()
	id, vols := s.containerID, s.volumes
	s.mu.Unlock()
	if id == "" {
		return "", fmt.Errorf("checkpoint %s on %s: %w", actorUID, s.name, ErrStale)
	}
	st, err := n.cfg.Snapshots.Stage(owner, opts.ID)
	if err != nil {
		return "", err
	}
	if opts.Scope != snapshot.ScopeData {
		if err := live.CheckpointLive(ctx, s.sb, id, st.Dir); err != nil {
			_ = n.cfg.Snapshots.Abort(st)
			return "", fmt.Errorf("checkpoint: %w", err)
		}
	}
	for _, v := range vols {
		if err := n.copyVolumeOut(st.Dir, v); err != nil {
			_ = n.cfg.Snapshots.Abort(st)
			return "", err
		}
	}
	ref, err := n.cfg.Snapshots.Commit(ctx, st, opts.Scope)
	if err != nil {
		_ = n.cfg.Snapshots.Abort(st)
		return "", err
	}
	return ref, nil
}
