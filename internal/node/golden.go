package node

import (
	"context"
	"fmt"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/snapshot"
)

// goldenBuilder is the node's golden-build slot: a slot of its own, never
// a worker, so building a template never takes capacity from actors. The
// slot's opMu serialises builds. It hosts no actor the tunnel could reach
// (it is not among Node.slots) and prepares no standbys.
type goldenBuilder struct {
	slot *slot
}

// BuildGolden boots spec on the node's build slot, waits for its wakeup
// probe, and checkpoints it (Full) as the golden snapshot owned by the
// template's uid, whose identity files name the template. It returns the
// snapshot and the digest of the image it ran, which the template pins;
// snapshotID names the snapshot as CheckpointOptions.ID does. Builds are
// serialised; they never use a worker. Each phase is told to ctx's
// ProgressFunc (nodeapi.WithProgress) as it begins.
func (n *Node) BuildGolden(ctx context.Context, tplUID, atespace, tplName string, spec *atev1.ActorTemplateSpec, snapshotID string) (ref, digest string, err error) {
	s := n.golden.slot
	s.opMu.Lock()
	defer s.opMu.Unlock()
	n.clearOp(ctx, s)
	defer n.clearOp(ctx, s)
	_, digest, err = n.startIn(ctx, s, StartRequest{ActorUID: tplUID, Atespace: atespace, Name: tplName, Spec: spec})
	if err != nil {
		return "", "", fmt.Errorf("golden build: %w", err)
	}
	nodeapi.Progress(ctx, nodeapi.PhaseCheckpoint)
	ref, err = n.checkpointOp(ctx, s, tplUID, CheckpointOptions{Scope: snapshot.ScopeFull, ID: snapshotID})
	if err != nil {
		return "", "", fmt.Errorf("golden build: %w", err)
	}
	n.offerTemplate(atespace, spec, digest)
	return ref, digest, nil
}
