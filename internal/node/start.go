package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/image"
	"substrate.dev/ate/internal/metrics"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/sandbox"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/tracing"
)

// IdentityDir is where every actor finds its identity files, actor-name,
// atespace and actor-uid, and its restore notification files, generation
// (decimal uint64, larger at every start) and random (32 fresh random
// bytes, hex); none has a trailing newline. All are in place before
// every boot and restore, before the wakeup probe (docs/restore.md).
const IdentityDir = "/run/ate"

type volume struct {
	name, hostDir string
	// mountPaths are where the actor's containers mount it (`ate cp`
	// resolves paths by them).
	mountPaths []string
}

// Start brings the actor up on the worker and returns once its wakeup probe
// passes and, after a restore, its template's onRestore hook has answered
// 2xx. A Data-scope snapshot restores only the volumes and cold-boots (no
// hook: a fresh process copied nothing). Errors wrap ErrStartFailed (plus
// sandbox.ErrRestoreFailed, snapshot.ErrCorrupt… where they apply) or
// ErrUnknownWorker.
func (n *Node) Start(ctx context.Context, req StartRequest) (err error) {
	ctx, span := tracing.Span(ctx, "node.start", attribute.String("ate.actor", req.Key().String()),
		attribute.String("ate.worker", req.Worker), attribute.String("ate.snapshot", req.Snapshot))
	defer func() { tracing.End(span, err) }()
	s, err := n.slot(req.Worker)
	if err != nil {
		return err
	}
	n.standbys.startBegan()
	defer n.standbys.startEnded()
	s.opMu.Lock()
	defer s.opMu.Unlock()
	// Checked under the slot's lock, so a start that waited for it sees
	// the lease as it is when the sandbox would start. A sandbox started
	// past the lease would only answer 421 (the tunnel refuses), and a
	// replica may be about to declare this node lost: refusing lets the
	// caller place the actor elsewhere at once.
	if err := n.admitFence(ctx, req.Worker, req.ActorUID); err != nil {
		return err
	}
	if !n.Serving() {
		return fmt.Errorf("%w: node %s cannot start actor %s on worker %s (its lease ran out %s ago, or the API server fenced it)",
			ErrNotServing, n.cfg.Name, req.Key(), req.Worker, n.LeaseLapsedFor().Round(time.Millisecond))
	}
	n.clearOp(ctx, s)
	began := time.Now()
	id, _, err := n.startIn(ctx, s, req)
	n.cfg.Metrics.Start(req.Snapshot != "", time.Since(began), err)
	if err != nil {
		// The start may have used the worker's standby up; the worker
		// is free again and should hold one.
		n.refill(s)
		n.log.WarnContext(ctx, "start failed", "actor", req.Key(), "worker", req.Worker, "snapshot", req.Snapshot, "err", err)
		return fmt.Errorf("%w: actor %s on worker %s: %w", ErrStartFailed, req.Key(), req.Worker, err)
	}
	n.goBackground(func() { n.watch(s, id, req.ActorUID) })
	return nil
}

// startIn boots or restores req in s, waits for the wakeup probe and,
// after a restore, calls the onRestore hook. On failure the slot is left
// empty. It returns the container id and the digest of the image it ran. When the slot's standby was
// prepared for the same container spec, the start goes into it
// (standby.go); if the boot or restore into it fails for any reason but
// ctx, the start is tried once more the ordinary way, so a dead standby
// costs time, never the request. A wakeup probe or hook that fails is the
// actor's own failure and is not retried: it would only wait out the
// timeout a second time.
func (n *Node) startIn(ctx context.Context, s *slot, req StartRequest) (id, digest string, err error) {
	spec := req.Spec
	if len(spec.GetContainers()) != 1 {
		return "", "", fmt.Errorf("template must have exactly one container, has %d", len(spec.GetContainers()))
	}
	c := spec.GetContainers()[0]
	// Before anything is written to the worker's volume directories,
	// which a sandbox that outlived its destroy may still mount.
	if len(s.leftovers) > 0 {
		return "", "", errLeftover
	}
	// Checked under s.opMu, which Shutdown takes after cancelling n.ctx.
	if n.ctx.Err() != nil {
		return "", "", errShuttingDown
	}
	nodeapi.Progress(ctx, nodeapi.PhaseImage)
	if ci, ok := n.cfg.Images.(interface{ Cached(digest string) bool }); ok && req.ImageDigest != "" {
		n.cfg.Metrics.ImageCache(ci.Cached(req.ImageDigest))
	}
	img, err := n.cfg.Images.EnsurePinned(ctx, req.Atespace, c.GetImage(), req.ImageDigest)
	if err != nil {
		return "", "", fmt.Errorf("image %s: %w", c.GetImage(), err)
	}
	snapDir, scope := "", snapshot.ScopeFull
	if req.Snapshot != "" {
		store := n.cfg.Snapshots
		if req.Paused {
			store = n.cfg.Paused
		}
		o, err := store.Open(ctx, req.Snapshot)
		if err != nil {
			return "", "", err
		}
		// The files are read until the restore (or its retry) is done.
		defer o.Close()
		snapDir, scope = o.Dir, o.Manifest.Scope
		n.cfg.Metrics.SnapshotBytes(metrics.BytesRead, o.Manifest.Bytes())
	}
	volDir := snapDir
	if req.VolumesFrom != "" {
		o, err := n.cfg.Snapshots.Open(ctx, req.VolumesFrom)
		if err != nil {
			return "", "", fmt.Errorf("volumes from %s: %w", req.VolumesFrom, err)
		}
		defer o.Close()
		volDir = o.Dir
	}
	vols, err := n.prepareVolumes(s, spec, volDir)
	if err != nil {
		return "", "", err
	}
	if err := n.ids.writeIdentity(s, req); err != nil {
		return "", "", fmt.Errorf("identity files: %w", err)
	}
	sspec, err := n.containerSpec(s, req.ActorUID, c, img, vols)
	if err != nil {
		return "", "", err
	}
	em, err := n.egressMounts(s, spec)
	if err != nil {
		return "", "", err
	}
	sspec.Mounts = append(sspec.Mounts, em...)
	// Before the sandbox runs: the template's allow-list, not the
	// previous actor's (clearOp cleared that) and not nothing.
	if err := n.applyEgress(ctx, s, spec); err != nil {
		return "", "", err
	}
	port := trafficPort(c, img)
	sb := n.takeStandby(ctx, s, sspec)
	if len(s.leftovers) > 0 { // the standby that did not fit outlived its destroy
		return "", "", errLeftover
	}
	if sb != nil {
		sspec.ID, sspec.BundleDir, sspec.Prepared = sb.ID, sb.BundleDir, true
	}
	n.cfg.Metrics.StandbyStart(sb != nil)
	restore := snapDir != "" && scope != snapshot.ScopeData
	for {
		s.running(sspec.ID, vols)
		s.gate.uncut()
		// Every attempt is a start of its own: a new generation even for
		// the retry, so no two starts ever read the same one.
		var gen uint64
		if gen, err = n.ids.writeNotice(s); err != nil {
			n.clearOp(ctx, s) // destroys the standby this start took, if any
			return "", "", fmt.Errorf("restore notification files: %w", err)
		}
		n.ids.logStart(s, req, sspec.ID, gen)
		n.beginActorLog(ctx, s, req, restore)
		nodeapi.Progress(ctx, nodeapi.PhaseBoot)
		var started bool
		if started, err = n.bootInTurn(ctx, s, req, sspec, snapDir, restore, port); err == nil {
			break
		}
		s.stopWhy = "start failed: " + err.Error()
		n.clearOp(ctx, s)
		// Only a sandbox that failed to come up in its standby is worth
		// a second attempt without one.
		if started || !sspec.Prepared || ctx.Err() != nil || errors.Is(err, errShuttingDown) {
			return "", "", err
		}
		n.log.WarnContext(ctx, "start in standby failed, starting afresh", "worker", s.name, "container", sspec.ID, "err", err)
		sspec.ID = newContainerID(req.ActorUID)
		sspec.BundleDir, sspec.Prepared = n.bundleDir(sspec.ID), false
		// clearOp emptied the volumes: restore them again.
		if vols, err = n.prepareVolumes(s, spec, volDir); err != nil {
			return "", "", err
		}
	}
	s.standby.hosted(&standbyTemplate{spec: spec, imageDigest: img.Digest, atespace: req.Atespace})
	s.gate.open(req.ActorUID, sspec.ID, port, nodeapi.FenceFrom(ctx))
	return sspec.ID, img.Digest, nil
}

// bootInTurn is one attempt of a start once its sandbox is set up: it
// waits for a start turn (startturns.go), restores or boots the sandbox,
// waits for the wakeup probe (unless the template skips it after a
// restore) and runs the restore hook. started reports
// whether the sandbox came up, so the caller knows whether a retry
// without the standby can help.
func (n *Node) bootInTurn(ctx context.Context, s *slot, req StartRequest, sspec sandbox.Spec, snapDir string, restore bool, port int) (started bool, err error) {
	turn, err := n.waitStartTurn(ctx)
	if err != nil {
		return false, err
	}
	defer turn.end()
	rctx, span := tracing.Span(ctx, "node.boot", attribute.Bool("ate.standby", sspec.Prepared))
	if restore {
		span.SetName("node.restore")
		err = n.cfg.Runtime.Restore(rctx, s.sb, sspec, snapDir)
	} else {
		err = n.cfg.Runtime.Run(rctx, s.sb, sspec)
	}
	tracing.End(span, err)
	if err != nil {
		return false, err
	}
	turn.booted()
	if restore && req.Spec.GetWakeupProbe().SkipsRestore() {
		// The template's app serves once its memory is back: its first,
		// slowest answer after the restore goes to the waking request.
		n.log.DebugContext(ctx, "wakeup probe skipped after the restore", "worker", s.name, "container", sspec.ID)
	} else {
		nodeapi.Progress(ctx, nodeapi.PhaseProbe)
		pctx, span := tracing.Span(ctx, "node.wakeup_probe")
		err = n.probe(pctx, s.sb, sspec.ID, req.Spec, port)
		tracing.End(span, err)
	}
	if err == nil && restore {
		// Before the tunnel admits anything (the gate opens once the
		// start returns): no request may see the state the snapshot
		// copied.
		err = n.restoreHook(ctx, s.sb, sspec.ID, req)
	}
	return true, err
}

func trafficPort(c *atev1.ContainerSpec, img *image.Image) int {
	if len(c.GetPorts()) > 0 {
		return int(c.GetPorts()[0])
	}
	if len(img.Config.ExposedPorts) > 0 {
		return img.Config.ExposedPorts[0]
	}
	return 8080
}

// prepareVolumes makes each durable volume's host directory on the worker
// hold the snapshot's copy (the snapshot is authoritative: a revert brings
// volumes back too), or nothing when there is none. The directories belong
// to the worker, not the actor, so that a standby's bind mounts
// (standby.go) fit every actor; they are emptied in place because a
// prepared sandbox holds them open, and emptied always so that no actor
// sees the previous one's data.
func (n *Node) prepareVolumes(s *slot, spec *atev1.ActorTemplateSpec, snapDir string) ([]volume, error) {
	var vols []volume
	for _, v := range spec.GetVolumes() {
		host := n.workerDir(s, "volumes", v.GetName())
		if err := snapshot.EmptyDir(host); err != nil {
			return nil, fmt.Errorf("volume %s: %w", v.GetName(), err)
		}
		src := filepath.Join(snapDir, snapshot.VolumesDir, v.GetName())
		if _, err := os.Stat(src); snapDir != "" && err == nil {
			if err := snapshot.CopyTree(host, src, nil); err != nil {
				return nil, fmt.Errorf("restore volume %s: %w", v.GetName(), err)
			}
		}
		vols = append(vols, volume{name: v.GetName(), hostDir: host, mountPaths: mountPaths(spec, v.GetName())})
	}
	return vols, nil
}

// workerLog is the file every container on s writes its output to.
func (n *Node) workerLog(s *slot) string { return n.ids.workerLog(s) }

// workerDir is s's own directory elem under the node's state dir.
func (n *Node) workerDir(s *slot, elem ...string) string { return n.ids.workerDir(s, elem...) }

// containerSpec merges the image config with the template's container.
// Everything in it but ID and BundleDir follows from the template, image
// and worker, never the actor, so a standby prepared for the template on
// this worker fits any of its actors.
func (n *Node) containerSpec(s *slot, ownerUID string, c *atev1.ContainerSpec, img *image.Image, vols []volume) (sandbox.Spec, error) {
	args := slices.Concat(img.Config.Entrypoint, img.Config.Cmd)
	if len(c.GetCommand()) > 0 {
		args = slices.Concat(c.GetCommand(), c.GetArgs())
	} else if len(c.GetArgs()) > 0 {
		args = slices.Concat(img.Config.Entrypoint, c.GetArgs())
	}
	if len(args) == 0 {
		return sandbox.Spec{}, fmt.Errorf("container %s has no command and its image no entrypoint", c.GetName())
	}
	env := slices.Clone(img.Config.Env)
	for _, k := range slices.Sorted(maps.Keys(c.GetEnv())) {
		env = append(env, k+"="+c.GetEnv()[k])
	}
	cwd := c.GetWorkingDir()
	if cwd == "" {
		cwd = img.Config.WorkingDir
	}
	mounts := []sandbox.Mount{{Source: n.workerDir(s, "identity"), Destination: IdentityDir, ReadOnly: true}}
	for _, vm := range c.GetVolumeMounts() {
		for _, v := range vols {
			if v.name == vm.GetName() {
				mounts = append(mounts, sandbox.Mount{Source: v.hostDir, Destination: vm.GetMountPath()})
			}
		}
	}
	id := newContainerID(ownerUID)
	return sandbox.Spec{
		ID: id, RootFS: img.RootFS, Args: args, Env: env, Cwd: cwd, Mounts: mounts,
		LogPath:   n.workerLog(s),
		BundleDir: n.bundleDir(id),
	}, nil
}

// newContainerID is unique per boot or restore: runsc refuses to reuse an
// id, and a fresh one keeps a late cleanup of the old container harmless.
func newContainerID(ownerUID string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	if len(ownerUID) > 12 {
		ownerUID = ownerUID[:12]
	}
	return "ate-" + ownerUID + "-" + hex.EncodeToString(b[:])
}
