// Package node is the node agent: it owns this machine's worker slots,
// turns a template into a running sandbox (image → bundle → run or restore
// → wakeup probe), checkpoints sandboxes into the snapshot store (or, for a
// pause, the node's own disk), notices sandboxes that die on their own, and
// fronts every worker with the worker tunnel (tunnel.go).
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"substrate.dev/ate/internal/actorlog"
	"substrate.dev/ate/internal/egress"
	"substrate.dev/ate/internal/image"
	"substrate.dev/ate/internal/metrics"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/sandbox"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/store"
)

// Images resolves image references to unpacked root filesystems; a
// non-empty digest pins the content (image.Cache.EnsurePinned).
type Images interface {
	EnsurePinned(ctx context.Context, atespace, ref, digest string) (*image.Image, error)
}

// SlotSetup prepares the sandbox slot (network namespaces) of worker name.
type SlotSetup func(ctx context.Context, name string) (sandbox.Slot, error)

// SlotTeardown removes what SlotSetup made.
type SlotTeardown func(ctx context.Context, slot sandbox.Slot) error

// Config configures a Node.
type Config struct {
	// Name of this node, recorded on its workers and on paused actors.
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
	// Teardown, if set, runs for every slot at Shutdown, so a stopped
	// node leaves no network namespaces behind.
	Teardown SlotTeardown
	Images   Images
	// Snapshots is the durable snapshot store; Paused holds paused
	// actors' checkpoints on this node's disk.
	Snapshots snapshot.Store
	Paused    *snapshot.Local
	// StateDir holds bundles, per-worker container logs, identity and
	// restore notification files, and volume directories.
	StateDir string
	// TunnelAddr is the address the tunnel listens on, recorded on workers.
	TunnelAddr string
	Logger     *slog.Logger
	// NoStandbys turns standby sandboxes off (standby.go): free workers
	// then hold no sandbox, saving its memory (BENCHMARKS.md, Density),
	// and every start pays the sandbox's start-up.
	NoStandbys bool
	// Metrics receives the node's metrics; nil records none.
	Metrics *metrics.Node
	// EgressDeny are addresses no template's egress allow-list may open
	// to, beyond those always denied (egress.Deny): the API server's.
	EgressDeny []netip.Prefix
	// EgressCeiling is the operator's egress ceiling, checked on every
	// connection's destination (egress.Deny); nil bounds nothing.
	EgressCeiling *egress.Ceiling
	// EgressResolver resolves allowed egress host names; nil uses
	// EgressDNS, else the node's resolver (net.DefaultResolver).
	EgressResolver egress.Resolver
	// EgressDNS is a DNS server (host:port) that resolves allowed egress
	// host names instead of the node's resolver (--egress-dns).
	EgressDNS string
	// VolumeLimits bound each volume a checkpoint copies out of a
	// sandbox (snapshot.CopyTreeWithin); a volume beyond them fails the
	// checkpoint (a suspend leaves the actor CRASHED at its last
	// snapshot). Zero fields do not bound.
	VolumeLimits snapshot.Limits
	// MaxParallelStarts is how many sandbox starts (restores and cold
	// boots, the runtime's part of a start) run at once; more wait their
	// turn in order (startturns.go). Zero is DefaultMaxParallelStarts.
	MaxParallelStarts int
	// SelfService bounds what each worker's actor may consume through
	// its self-service endpoint (selfservicelimits.go); zero fields take
	// the defaults.
	SelfService SelfServiceLimits
}

// Default volume limits of the commands (--max-volume-bytes,
// --max-volume-entries): generous for a coding sandbox's checkout and
// dependencies, far below what fills a node's disk.
const (
	DefaultMaxVolumeBytes   = 10 << 30
	DefaultMaxVolumeEntries = 1_000_000
)

// Node is the node agent. Safe for concurrent use. It is a composition of
// parts, each owning its own state and lock, so that the tunnel and the
// node's API can later move behind a network protocol without the rest:
//
//   - slots (slot.go): the worker slots, fixed at New; each serialises its
//     sandbox operations and records the container it runs.
//   - each slot's gate (admission.go): the tunnel's admission and
//     activity bookkeeping — the only slot state the tunnel reads.
//   - standbys (standby.go): which free workers hold a prepared sandbox,
//     and whether to prepare more.
//   - ids (identity.go): identity, restore notification and log files.
//   - golden (golden.go): the golden-build slot.
//   - self-service (selfservice.go): the endpoint actors call from inside.
//   - the sandbox transport (tunnel.go): pooled connections into sandboxes
//     for the tunnel and the wakeup probe.
//
// The methods on Node are the workflows that span these parts (start,
// checkpoint, stop, refill) and the package's exported API.
type Node struct {
	cfg Config
	log *slog.Logger
	// slots and order (their names, in order) are fixed at New.
	slots map[string]*slot
	order []string

	golden   goldenBuilder
	standbys standbys
	// committedIDs: the checkpoint ids committed here (checkpoint.go).
	committedIDs recentIDs
	// fences: the newest lease token per actor (fence.go).
	fences fenceTokens
	// viewChanged: ViewChanged.
	viewChanged chan struct{}
	ids         identityWriter
	// actorLogs keeps each actor's output across its runs (actorlogs.go).
	actorLogs *actorlog.Dir

	// ctx is the node's lifetime, cancelled by Shutdown. It is kept
	// rather than passed because the goroutines it bounds outlive the
	// calls that start them: exit watchers (watch) and standby refills,
	// started by Start, Checkpoint and Stop, and the tunnel's cutters
	// (cut.go), started by requests. bg counts the first two, which
	// Shutdown waits for.
	ctx    context.Context
	cancel context.CancelFunc
	bg     sync.WaitGroup

	// uplink is told of exits and idle workers and answers self-service
	// calls (SetUplink); nil until set. Atomic: exits and requests read
	// it on their own goroutines.
	uplink atomic.Pointer[nodeapi.Uplink]
	// fenced refuses all tunnel traffic (Fence); so does a lease that
	// has run out (ExtendLease; nil: none is kept).
	fenced atomic.Bool
	lease  atomic.Pointer[time.Time]

	// conns pools HTTP connections into sandboxes for the tunnel and
	// the wakeup probe; open tracks them per container (tunnel.go).
	conns *http.Transport
	open  openConns

	// turns admits sandbox starts a few at a time (startturns.go).
	turns *startTurns
}

// New sets up every worker slot (and the golden-build slot). A previous
// run's containers are gone with its runsc state; actors' data lives in
// their snapshots.
func New(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.SelfService.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxParallelStarts < 0 {
		return nil, fmt.Errorf("--max-parallel-starts is %d: give a positive number of starts, or 0 for the default (two per CPU)", cfg.MaxParallelStarts)
	}
	if cfg.EgressResolver == nil && cfg.EgressDNS != "" {
		cfg.EgressResolver = egress.DNSResolver(cfg.EgressDNS)
	}
	n := &Node{cfg: cfg, log: cfg.Logger, slots: map[string]*slot{}, ids: identityWriter{stateDir: cfg.StateDir},
		viewChanged: make(chan struct{}, 1)}
	n.standbys.init(cfg.Runtime, cfg.NoStandbys, n.viewChanged)
	n.conns = n.newSandboxTransport()
	n.turns = newStartTurns(cfg.MaxParallelStarts)
	n.ctx, n.cancel = context.WithCancel(context.WithoutCancel(ctx))
	for _, d := range []string{"bundles", "logs", "workers"} {
		if err := os.MkdirAll(filepath.Join(cfg.StateDir, d), 0o700); err != nil {
			return nil, fmt.Errorf("node state dir: %w", err)
		}
	}
	var err error
	if n.actorLogs, err = actorlog.Open(filepath.Join(cfg.StateDir, "actorlogs")); err != nil {
		return nil, err
	}
	// Sandboxes a killed predecessor left running would hold the worker
	// namespaces and answer for actors they no longer host.
	if da, ok := cfg.Runtime.(interface{ DestroyAll(context.Context) error }); ok {
		if err := da.DestroyAll(ctx); err != nil {
			return nil, fmt.Errorf("clean up previous sandboxes: %w", err)
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
		s := &slot{name: name, sb: sb}
		if err := n.setUpEgress(s); err != nil {
			return nil, fmt.Errorf("set up worker %s: %w", name, err)
		}
		// Made once: starts and standbys bind-mount it and only ever
		// rewrite the files in it.
		if err := os.MkdirAll(n.workerDir(s, "identity"), 0o755); err != nil {
			return nil, fmt.Errorf("worker %s: %w", name, err)
		}
		if i == 0 {
			n.golden.slot = s
			continue
		}
		n.slots[name] = s
		n.order = append(n.order, name)
	}
	cfg.Metrics.WorkerSource(func() (free, busy int) {
		busy = len(n.Hosted())
		return len(n.order) - busy, busy
	})
	return n, nil
}

// Name returns the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// SetUplink sets what the node tells its control plane: sandboxes that
// exit on their own, workers that become idle, and actors' self-service
// calls. Set it before ServeSelfService.
func (n *Node) SetUplink(u nodeapi.Uplink) { n.uplink.Store(&u) }

// up returns the uplink, nil when none is set.
func (n *Node) up() nodeapi.Uplink {
	if u := n.uplink.Load(); u != nil {
		return *u
	}
	return nil
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

func (n *Node) slot(worker string) (*slot, error) {
	s, ok := n.slots[worker]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownWorker, worker)
	}
	return s, nil
}

// goBackground runs f on a goroutine Shutdown waits for.
func (n *Node) goBackground(f func()) { n.bg.Go(f) }

func (n *Node) destroy(ctx context.Context, s *slot, id string) {
	// Cleanup must run even when the caller's context has ended.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := n.cfg.Runtime.Destroy(ctx, s.sb, id); err != nil {
		// Its sandbox may still run, in the worker's network namespaces
		// and with the worker's volume directories mounted: the next
		// actor placed here would share them. Fail closed: the worker
		// hosts nothing until a retry destroys it (clearOp).
		n.log.ErrorContext(ctx, "destroy container failed; the worker hosts nothing until it is gone", "worker", s.name, "container", id, "err", err)
		s.leftovers = append(s.leftovers, id)
		n.open.closeAll(id)
		return
	}
	n.containerGone(id)
}

// errLeftover: a worker's earlier sandbox could not be destroyed, so
// nothing may start on it.
var errLeftover = errors.New("the worker's previous sandbox could not be destroyed; see the node's log")

// errShuttingDown: Shutdown has begun. Its sweep destroys what each
// worker holds once, so a sandbox started after it would outlive the
// node (and recreate the runsc root its runtime's Close removed).
var errShuttingDown = errors.New("the node is shutting down")

// retryLeftovers destroys again the containers of s whose destroy
// failed; those that fail again stay in s.leftovers. s.opMu must be held.
func (n *Node) retryLeftovers(ctx context.Context, s *slot) {
	ids := s.leftovers
	s.leftovers = nil
	for _, id := range ids {
		n.destroy(ctx, s, id)
	}
}

// containerGone drops what the node kept for container id once it no
// longer runs: its bundle and its connections.
func (n *Node) containerGone(id string) {
	_ = os.RemoveAll(n.bundleDir(id))
	n.open.closeAll(id)
}

// bundleDir is where container id's OCI bundle goes; destroy removes it.
func (n *Node) bundleDir(id string) string {
	return filepath.Join(n.cfg.StateDir, "bundles", id)
}

// clearOp destroys whatever s hosts, closes its gate and empties its
// volume directories: their data is in the actor's snapshot (or was lost
// with the sandbox), and the worker's next actor must not see it. s.opMu
// must be held.
func (n *Node) clearOp(ctx context.Context, s *slot) {
	n.endExecs(s)
	id, vols := s.stop()
	if id != "" {
		n.destroy(ctx, s, id)
	}
	n.retryLeftovers(ctx, s)
	for _, v := range vols {
		if err := snapshot.EmptyDir(v.hostDir); err != nil {
			n.log.WarnContext(ctx, "empty volume directory", "worker", s.name, "dir", v.hostDir, "err", err)
		}
	}
	s.gate.close()
	s.cleared()
	n.clearEgress(s)
	n.endActorLog(ctx, s)
}

// Stop destroys the actor's sandbox on worker; a no-op when the worker
// hosts another actor or none.
func (n *Node) Stop(ctx context.Context, worker, actorUID string) error {
	s, err := n.slot(worker)
	if err != nil {
		return err
	}
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if err := n.admitFence(ctx, worker, actorUID); err != nil {
		return err
	}
	if s.gate.hosts(actorUID) {
		s.gate.stopped()
		s.stopWhy = "stopped"
		n.clearOp(ctx, s)
		n.refill(s)
	}
	return nil
}

// Shutdown destroys every container on the node, stops exit watchers and
// standby refills and waits for them, and tears the slots down.
func (n *Node) Shutdown(ctx context.Context) {
	n.StopStandbys()
	n.cancel()
	for _, s := range append(slices.Collect(maps.Values(n.slots)), n.golden.slot) {
		s.opMu.Lock()
		s.stopWhy = "stopped: node shutting down"
		n.clearOp(ctx, s)
		n.dropStandby(ctx, s)
		s.files.close()
		if s.egress != nil {
			_ = s.egress.Close()
		}
		if n.cfg.Teardown != nil {
			if err := n.cfg.Teardown(ctx, s.sb); err != nil {
				n.log.Warn("tear down worker", "worker", s.name, "err", err)
			}
		}
		s.opMu.Unlock()
	}
	n.bg.Wait()
	n.conns.CloseIdleConnections()
}

// watch waits for container id in s to exit and reports it if nobody
// ended it on purpose. It runs on the node's background group.
func (n *Node) watch(s *slot, id, actorUID string) {
	err := n.cfg.Runtime.Wait(n.ctx, s.sb, id)
	if n.ctx.Err() != nil {
		return
	}
	if !s.diedOnItsOwn(id) {
		return
	}
	n.log.Warn("sandbox exited on its own", "worker", s.name, "container", id, "err", err)
	s.opMu.Lock()
	still := s.runs(id)
	if still {
		s.stopWhy = fmt.Sprintf("sandbox exited on its own (%v)", err)
		n.clearOp(n.ctx, s)
		n.refill(s)
	}
	s.opMu.Unlock()
	if u := n.up(); still && u != nil {
		u.WorkerExited(s.name, actorUID)
	}
}
