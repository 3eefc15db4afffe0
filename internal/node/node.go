// Package node is the node agent: it owns this machine's worker slots,
// turns a template into a running sandbox (image → bundle → run or restore
// → wakeup probe), checkpoints sandboxes into the snapshot store, and fronts
// every worker with the worker tunnel (tunnel.go).
package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/image"
	"substrate.dev/ate/internal/sandbox"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/store"
)

// ErrStale: the worker does not host the actor the caller expects (it was
// suspended, moved or never started there).
var ErrStale = errors.New("worker does not host this actor")

// ErrUnknownWorker: no worker of that name on this node.
var ErrUnknownWorker = errors.New("unknown worker")

// ErrStartFailed wraps any failure to bring a sandbox to ready (image,
// boot, restore, wakeup probe). The slot is empty again when it is returned.
var ErrStartFailed = errors.New("start failed")

// Images resolves image references to unpacked root filesystems.
type Images interface {
	Ensure(ctx context.Context, ref string) (*image.Image, error)
}

// SlotSetup prepares the sandbox slot (network namespaces) of worker name.
type SlotSetup func(ctx context.Context, name string) (sandbox.Slot, error)

// Config configures a Node.
type Config struct {
	// Name of this node, recorded on its workers.
	Name string
	// Workers is how many worker slots to run; WorkerPrefix names them
	// "<prefix>-w<i>" (and the golden-build slot "<prefix>-build"), so
	// several nodes can share a machine.
	Workers      int
	WorkerPrefix string
	Labels       map[string]string
	SandboxClass string
	Runtime      sandbox.Runtime
	Setup        SlotSetup
	Images       Images
	Snapshots    *snapshot.Local
	// StateDir holds bundles and per-actor logs.
	StateDir string
	// TunnelAddr is the address the tunnel listens on, recorded on workers.
	TunnelAddr string
	Logger     *slog.Logger
}

// slot is one worker. mu serialises sandbox operations on it and guards
// the fields below it.
type slot struct {
	sb sandbox.Slot

	mu          sync.Mutex
	containerID string
	actorUID    string
	port        int
}

// Node is the node agent. Safe for concurrent use.
type Node struct {
	cfg   Config
	log   *slog.Logger
	slots map[string]*slot
	order []string
	build *slot
}

// New sets up every worker slot (and the golden-build slot) and destroys
// whatever containers a previous run left in them.
func New(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	n := &Node{cfg: cfg, log: cfg.Logger, slots: map[string]*slot{}}
	for _, d := range []string{"bundles", "logs"} {
		if err := os.MkdirAll(filepath.Join(cfg.StateDir, d), 0o700); err != nil {
			return nil, fmt.Errorf("node state dir: %w", err)
		}
	}
	names := []string{cfg.WorkerPrefix + "-build"}
	for i := range cfg.Workers {
		names = append(names, fmt.Sprintf("%s-w%d", cfg.WorkerPrefix, i))
	}
	for i, name := range names {
		sb, err := cfg.Setup(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("set up worker %s: %w", name, err)
		}
		s := &slot{sb: sb}
		if i == 0 {
			n.build = s
			continue
		}
		n.slots[name] = s
		n.order = append(n.order, name)
	}
	return n, nil
}

// Workers describes this node's workers for registration in the store.
func (n *Node) Workers() []*store.Worker {
	out := make([]*store.Worker, 0, len(n.order))
	for _, name := range n.order {
		out = append(out, &store.Worker{Name: name, Node: n.cfg.Name, TunnelAddr: n.cfg.TunnelAddr,
			SandboxClass: n.cfg.SandboxClass, Labels: maps.Clone(n.cfg.Labels)})
	}
	return out
}

// StartRequest asks a worker to host an actor.
type StartRequest struct {
	Worker   string
	ActorUID string
	// Actor is "<atespace>/<name>", for logs.
	Actor string
	Spec  *atev1.ActorTemplateSpec
	// Snapshot is the reference to restore; empty means a cold boot.
	Snapshot string
}

// Start brings the actor up on the worker and returns once its wakeup probe
// passes. Errors wrap ErrStartFailed (plus sandbox.ErrRestoreFailed,
// snapshot.ErrCorrupt… where they apply) or ErrUnknownWorker.
func (n *Node) Start(ctx context.Context, req StartRequest) error {
	s, ok := n.slots[req.Worker]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownWorker, req.Worker)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n.clearLocked(ctx, s)
	port, id, err := n.startIn(ctx, s, req.ActorUID, req.Spec, req.Snapshot)
	if err != nil {
		n.log.WarnContext(ctx, "start failed", "actor", req.Actor, "worker", req.Worker, "snapshot", req.Snapshot, "err", err)
		return fmt.Errorf("%w: actor %s on worker %s: %w", ErrStartFailed, req.Actor, req.Worker, err)
	}
	s.containerID, s.actorUID, s.port = id, req.ActorUID, port
	return nil
}

// startIn boots or restores spec in s and waits for the wakeup probe. On
// failure the slot is left empty. It returns the traffic port and container id.
func (n *Node) startIn(ctx context.Context, s *slot, ownerUID string, spec *atev1.ActorTemplateSpec, snapRef string) (int, string, error) {
	if len(spec.GetContainers()) != 1 {
		return 0, "", fmt.Errorf("template must have exactly one container, has %d", len(spec.GetContainers()))
	}
	c := spec.GetContainers()[0]
	img, err := n.cfg.Images.Ensure(ctx, c.GetImage())
	if err != nil {
		return 0, "", fmt.Errorf("image %s: %w", c.GetImage(), err)
	}
	sspec, err := n.containerSpec(ownerUID, c, img)
	if err != nil {
		return 0, "", err
	}
	if snapRef == "" {
		err = n.cfg.Runtime.Run(ctx, s.sb, sspec)
	} else {
		var dir string
		if dir, err = n.cfg.Snapshots.Open(snapRef); err == nil {
			err = n.cfg.Runtime.Restore(ctx, s.sb, sspec, dir)
		}
	}
	if err == nil {
		err = n.probe(ctx, s.sb, spec, trafficPort(c, img))
	}
	if err != nil {
		n.destroy(ctx, s.sb, sspec.ID)
		return 0, "", err
	}
	return trafficPort(c, img), sspec.ID, nil
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

// containerSpec merges the image config with the template's container.
func (n *Node) containerSpec(ownerUID string, c *atev1.ContainerSpec, img *image.Image) (sandbox.Spec, error) {
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
	id := newContainerID(ownerUID)
	return sandbox.Spec{
		ID: id, RootFS: img.RootFS, Args: args, Env: env, Cwd: cwd,
		LogPath:   filepath.Join(n.cfg.StateDir, "logs", ownerUID+".log"),
		BundleDir: filepath.Join(n.cfg.StateDir, "bundles", id),
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

func (n *Node) destroy(ctx context.Context, sb sandbox.Slot, id string) {
	// Cleanup must run even when the caller's context has ended.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := n.cfg.Runtime.Destroy(ctx, sb, id); err != nil {
		n.log.WarnContext(ctx, "destroy container", "worker", sb.Name, "container", id, "err", err)
	}
	_ = os.RemoveAll(filepath.Join(n.cfg.StateDir, "bundles", id))
}

// clearLocked destroys whatever s hosts. s.mu must be held.
func (n *Node) clearLocked(ctx context.Context, s *slot) {
	if s.containerID != "" {
		n.destroy(ctx, s.sb, s.containerID)
	}
	s.containerID, s.actorUID, s.port = "", "", 0
}

// Checkpoint writes a full snapshot of the actor hosting worker into the
// snapshot store and empties the worker. It returns the committed
// snapshot's reference. Errors wrap ErrStale when actorUID is not hosted
// there; on any error the worker is emptied too, since a failed checkpoint
// may have stopped the sandbox.
func (n *Node) Checkpoint(ctx context.Context, worker, actorUID string) (string, error) {
	s, ok := n.slots[worker]
	if !ok {
		return "", fmt.Errorf("%w: %s", ErrUnknownWorker, worker)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.actorUID != actorUID {
		return "", fmt.Errorf("checkpoint %s on %s: %w", actorUID, worker, ErrStale)
	}
	ref, err := n.checkpointLocked(ctx, s, actorUID)
	n.clearLocked(ctx, s)
	return ref, err
}

func (n *Node) checkpointLocked(ctx context.Context, s *slot, owner string) (string, error) {
	st, err := n.cfg.Snapshots.Stage(owner)
	if err != nil {
		return "", err
	}
	if err := n.cfg.Runtime.Checkpoint(ctx, s.sb, s.containerID, st.Dir); err != nil {
		_ = n.cfg.Snapshots.Abort(st)
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	ref, err := n.cfg.Snapshots.Commit(st)
	if err != nil {
		_ = n.cfg.Snapshots.Abort(st)
		return "", err
	}
	return ref, nil
}

// Stop destroys the actor's sandbox on worker; a no-op when the worker
// hosts another actor or none.
func (n *Node) Stop(ctx context.Context, worker, actorUID string) error {
	s, ok := n.slots[worker]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownWorker, worker)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.actorUID == actorUID {
		n.clearLocked(ctx, s)
	}
	return nil
}

// BuildGolden boots spec on the node's build slot, waits for its wakeup
// probe, and checkpoints it as the golden snapshot owned by ownerUID (the
// template's uid). Builds are serialised; they never use a worker.
func (n *Node) BuildGolden(ctx context.Context, ownerUID string, spec *atev1.ActorTemplateSpec) (string, error) {
	s := n.build
	s.mu.Lock()
	defer s.mu.Unlock()
	n.clearLocked(ctx, s)
	_, id, err := n.startIn(ctx, s, ownerUID, spec, "")
	if err != nil {
		return "", fmt.Errorf("golden build: %w", err)
	}
	s.containerID = id
	ref, err := n.checkpointLocked(ctx, s, ownerUID)
	n.clearLocked(ctx, s)
	if err != nil {
		return "", fmt.Errorf("golden build: %w", err)
	}
	return ref, nil
}

// Shutdown destroys every container on the node.
func (n *Node) Shutdown(ctx context.Context) {
	for _, s := range append(slices.Collect(maps.Values(n.slots)), n.build) {
		s.mu.Lock()
		n.clearLocked(ctx, s)
		s.mu.Unlock()
	}
}

// assignment returns the actor uid and port worker hosts now.
func (n *Node) assignment(worker string) (uid string, port int, sb sandbox.Slot, err error) {
	s, ok := n.slots[worker]
	if !ok {
		return "", 0, sandbox.Slot{}, fmt.Errorf("%w: %s", ErrUnknownWorker, worker)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.actorUID, s.port, s.sb, nil
}
