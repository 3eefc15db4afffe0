package up

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	atev1 "substrate.dev/ate/api/ate/v1"

	"substrate.dev/ate/internal/alarm"
	"substrate.dev/ate/internal/apiserver"
	"substrate.dev/ate/internal/identity"
	"substrate.dev/ate/internal/image"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/metrics"
	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/nodeagent"
	"substrate.dev/ate/internal/runner"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/store"
	storeurl "substrate.dev/ate/internal/store/storeurl"
)

// ControlPlaneConfig says what NewControlPlane builds.
type ControlPlaneConfig struct {
	// DataDir is absolute and exists; it holds ate.db, snapshots/,
	// images/ and node/.
	DataDir string
	// Node configures the node agent. The caller sets Workers,
	// WorkerPrefix, SandboxClass, Runtime, Setup, Teardown, TunnelAddr
	// (where the worker tunnel listens, recorded on workers) and
	// NoStandbys; NewControlPlane sets Images, Snapshots, Paused and
	// StateDir under DataDir, Name if empty (DefaultNodeName) and Logger
	// if nil.
	Node node.Config
	// Store is the record store's URL (Config.Store); empty for
	// <DataDir>/ate.db.
	Store string
	// SnapshotsDir is the durable snapshot directory; default
	// <DataDir>/snapshots. Control planes sharing a store must share it.
	SnapshotsDir string
	// Exclusive makes this the only control plane over a shared store
	// (`ate up`, whose snapshots live in its own data dir, so a second
	// installation over the database could restore none of them):
	// NewControlPlane refuses to start while another holds the store's
	// installation lease, and the control plane holds it until Close.
	Exclusive bool
	// ExpiryInterval is how often Start's expiry sweep deletes actors
	// unused past their template's ttl (lifecycle.RunExpiry; default
	// lifecycle.DefaultExpiryInterval).
	ExpiryInterval time.Duration
	// Ceilings are the operator's bounds on templates; nil bounds
	// nothing (tests; the commands always set them).
	Ceilings *CeilingsConfig
	// ImageRoots are the directories oci: and oci-archive: template
	// images may be read from (--image-root, image.LocalRoots); nil
	// allows any path, an empty list none.
	ImageRoots []string
	// RegistryCredentials are whose credentials registry pulls use
	// (--registry-credentials, image.ParseCredentials): anonymous, the
	// machine's own, or a directory of one config.json per atespace.
	RegistryCredentials string

	Logger *slog.Logger
	// Metrics, if set, receives the node's and the lifecycle's metrics.
	Metrics *metrics.Metrics
	// Identity configures actor identity; an empty IssuerURL may be set
	// later (ControlPlane.Identity.SetIssuerURL), once the HTTP listener
	// that serves discovery has its address.
	Identity IdentityConfig
	// AlarmTunnelTLS, if set, is the TLS config alarm deliveries reach
	// the worker tunnel with (alarm.Config.TunnelTLS).
	AlarmTunnelTLS *tls.Config
	// Heartbeat and LostAfter are the node registry's
	// (nodeagent.RegistryConfig), which the in-process node is subject
	// to as any node is.
	Heartbeat, LostAfter time.Duration
	// MaxStreamsPerCaller: apiserver.Server.SetMaxStreamsPerCaller (0:
	// apiserver.DefaultMaxStreamsPerCaller).
	MaxStreamsPerCaller int
}

// releaseTimeout bounds giving the installation lease up at Close.
const releaseTimeout = 5 * time.Second

// ControlPlane is everything of `ate up` but the listeners: the embedded
// store, the snapshot stores, the node registry, the node agent
// registered with it, the lifecycle manager (recovered) and the API
// server implementation. The node reaches the registry as a node in a
// cluster does — its Agent, the node protocol, heartbeats, the loss
// deadline, fencing, drain — over an in-process transport
// (nodeagent.InProcess), and the workflows reach the node through the
// registry. `ate up` and the control-plane benchmarks build it the same
// way: NewControlPlane, then Start for its background work, then Close.
type ControlPlane struct {
	// installation is the installation lease (Exclusive); nil without
	// one. It is renewed on a context of its own (stopRenewal,
	// renewalDone), not the background work's: Start returns before
	// `ate up` suspends every actor, which may take longer than the
	// lease lives, and Close releases it only once the workflows and the
	// node have stopped, so no other `ate up` takes the database while
	// this one still writes to it.
	installation *store.Installation
	stopRenewal  context.CancelFunc
	renewalDone  sync.WaitGroup

	Store     store.Store
	Snapshots *snapshot.Local
	Node      *node.Node
	// Registry is the node registry the in-process node registers with.
	Registry  *nodeagent.Registry
	Lifecycle *lifecycle.Manager
	API       *apiserver.Server
	// Alarms fires scheduled wake-ups (Start runs it).
	Alarms *alarm.Scheduler
	// Identity mints actor tokens and serves discovery (Start rotates
	// its keys).
	Identity *identity.Issuer

	log *slog.Logger
	// background bounds recovery and Start's wait: it lives from
	// NewControlPlane until Start's context ends or Close, whichever
	// comes first. stopBackground cancels it. Golden builds belong to
	// the lifecycle manager, whose Close (in ours) ends them.
	background     context.Context
	stopBackground context.CancelFunc
	// snapshotGCDone is closed when Start's snapshot collection has
	// made its first pass, snapshotGCEnded when it has returned (Close
	// waits for that: over a shared store passes go on after the
	// first).
	snapshotGCDone, snapshotGCEnded chan struct{}
	// sharedWithOthers: other control planes' workflows run over the
	// store (shared, not Exclusive), so Start's collection waits theirs
	// out.
	sharedWithOthers bool
	started          atomic.Bool
	// expiryInterval is ControlPlaneConfig.ExpiryInterval.
	expiryInterval time.Duration
	// metrics is ControlPlaneConfig.Metrics.
	metrics *metrics.Metrics
	// nodePath carries the node protocol in process; stopNodePath ends
	// it (the transport, the registry's loss checks, the agent's
	// sessions, the node's self-service endpoint) and nodePathDone waits
	// for it: in Close, after the workflows that call the node.
	nodePath     *nodeagent.InProcess
	stopNodePath context.CancelFunc
	nodePathDone sync.WaitGroup
}

// DBName is the store file in the data directory.
const DBName = "ate.db"

// NewControlPlane builds and recovers a control plane; ctx bounds the
// building only. Golden builds that recovery restarts run on, owned by
// the lifecycle manager, until Close. Errors leave nothing open.
func NewControlPlane(ctx context.Context, cfg ControlPlaneConfig) (_ *ControlPlane, err error) {
	log := orDiscard(cfg.Logger)
	// A local, not the named result: `return nil, err` clears the result
	// before the deferred Close runs.
	cp := &ControlPlane{log: log, snapshotGCDone: make(chan struct{}), snapshotGCEnded: make(chan struct{}), expiryInterval: cfg.ExpiryInterval, metrics: cfg.Metrics}
	cp.background, cp.stopBackground = context.WithCancel(context.WithoutCancel(ctx))
	// While building, ending ctx ends the background work too (a recovery
	// cut short by a signal stops its builds); afterwards only Start's
	// context or Close do.
	unlink := context.AfterFunc(ctx, cp.stopBackground)
	defer unlink()
	defer func() {
		if err != nil {
			cp.Close()
		}
	}()
	a := &controlPlaneAssembly{cp: cp, cfg: cfg, log: log}
	if err := assemble(ctx, a.openStore, a.newNode, a.newAPI,
		func(ctx context.Context) error { return cp.startNodePath(ctx, a.node, log) }); err != nil {
		return nil, err
	}
	return cp, nil
}

// controlPlaneAssembly is what NewControlPlane's steps pass on to each
// other besides the control plane's own fields.
type controlPlaneAssembly struct {
	cp  *ControlPlane
	cfg ControlPlaneConfig
	log *slog.Logger
	// shared is storeurl.Opened.Shared.
	shared   bool
	nc       node.Config
	node     nodeParts
	images   *image.Cache
	ceilings apiserver.Ceilings
}

// openStore opens the record store, waiting for a database that is not
// up yet (storeurl.OpenRetrying), takes the installation lease when
// Exclusive over a shared store, and makes the default atespace.
func (a *controlPlaneAssembly) openStore(ctx context.Context) error {
	cp := a.cp
	opened, err := storeurl.OpenRetrying(ctx, a.cfg.Store, storeurl.Options{DefaultPath: filepath.Join(a.cfg.DataDir, DBName), Logger: a.log})
	if err != nil {
		return fmt.Errorf("record store: %w", err)
	}
	cp.Store, a.shared = opened.Store, opened.Shared
	cp.sharedWithOthers = a.shared && !a.cfg.Exclusive
	observeCommits(cp.Store, a.cfg.Metrics)
	if a.shared && a.cfg.Exclusive {
		// This data dir on this host: a restarted `ate up` takes its
		// lease back at once.
		host, _ := os.Hostname()
		in, err := store.TakeInstallation(ctx, cp.Store, host+":"+a.cfg.DataDir, orDefault(a.cfg.Node.Name, DefaultNodeName))
		if err != nil {
			return err
		}
		var renewCtx context.Context
		renewCtx, cp.stopRenewal = context.WithCancel(context.WithoutCancel(ctx))
		cp.installation = in
		cp.renewalDone.Go(func() { in.Renew(renewCtx, cp.log) })
	}
	return apiserver.EnsureDefaultAtespace(ctx, cp.Store)
}

// newNode opens the snapshot stores and the image cache, and builds the
// node agent over them, fenced until the registry welcomes it.
func (a *controlPlaneAssembly) newNode(ctx context.Context) error {
	cp, cfg := a.cp, a.cfg
	var err error
	if cp.Snapshots, err = snapshot.NewLocalWith(orDefault(cfg.SnapshotsDir, filepath.Join(cfg.DataDir, "snapshots")), snapshot.LocalOptions{Compress: true}); err != nil {
		return err
	}
	// Paused checkpoints stay on this node's disk, apart from the
	// durable snapshot store (which would be S3 or shared storage in a cluster).
	paused, err := snapshot.NewLocal(filepath.Join(cfg.DataDir, "node", "paused"))
	if err != nil {
		return err
	}
	if a.images, err = newImageCache(cfg.DataDir, cfg.ImageRoots, cfg.RegistryCredentials, a.log); err != nil {
		return err
	}
	if a.ceilings, err = cfg.Ceilings.apiCeilings(ctx, a.log, cfg.Store); err != nil {
		return err
	}
	nc := cfg.Node
	nc.Name = orDefault(nc.Name, DefaultNodeName)
	nc.EgressCeiling = a.ceilings.Egress
	nc.Images, nc.Snapshots, nc.Paused, nc.StateDir = a.images, cp.Snapshots, paused, filepath.Join(cfg.DataDir, "node")
	if nc.Logger == nil {
		nc.Logger = a.log
	}
	if cfg.Metrics != nil {
		nc.Metrics = cfg.Metrics.Node
	}
	cp.nodePath = nodeagent.NewInProcess()
	if a.node, err = newNodeParts(ctx, nc, nodeagent.AgentConfig{Replicas: cp.nodePath.Replicas, Dial: cp.nodePath.DialRegistry,
		Address: nodeagent.InProcessAddress}); err != nil {
		return err
	}
	cp.Node = a.node.node
	a.nc = nc
	return nil
}

// newAPI builds the API server's parts (newAPICore), its registry
// reaching the node over the in-process transport, then recovers the
// workflows: the node and this API server are one process, so before
// the node registers, the actors holding its workers go back to their
// last snapshot (lifecycle.Manager.Recover).
func (a *controlPlaneAssembly) newAPI(ctx context.Context) error {
	cp, cfg := a.cp, a.cfg
	core, err := newAPICore(ctx, apiCoreConfig{Store: cp.Store, Shared: a.shared, Snapshots: cp.Snapshots,
		Registry: nodeagent.RegistryConfig{Heartbeat: cfg.Heartbeat, LostAfter: cfg.LostAfter, Dial: cp.nodePath.DialNode, OneProcess: true},
		Ceilings: a.ceilings, SandboxClass: a.nc.SandboxClass, Images: a.images, MaxStreamsPerCaller: cfg.MaxStreamsPerCaller,
		Alarm: alarm.Config{TunnelTLS: cfg.AlarmTunnelTLS}, AlarmHolder: "ate-up", Identity: cfg.Identity, Metrics: cfg.Metrics, Logger: a.log})
	if err != nil {
		return err
	}
	cp.Registry, cp.Lifecycle, cp.API, cp.Alarms, cp.Identity = core.registry, core.lifecycle, core.api, core.alarms, core.issuer
	if err := cp.Lifecycle.Recover(cp.background, a.nc.Name); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	return nil
}

// startNodePath serves the node protocol in process and registers the
// node with the registry through its agent, returning once the
// registry has welcomed it (its registration re-registers its workers
// and unregisters those an earlier run had and this one has not:
// nodeagent.Registry.reconcile). It runs until Close.
func (cp *ControlPlane) startNodePath(ctx context.Context, p nodeParts, log *slog.Logger) error {
	var nodeCtx context.Context
	nodeCtx, cp.stopNodePath = context.WithCancel(context.WithoutCancel(ctx))
	registered := make(chan error, 1)
	r := runner.New(log)
	r.Add("in-process node protocol", func(ctx context.Context) error { return cp.nodePath.Serve(ctx, cp.Registry, p.service) })
	r.Add("node registry", cp.Registry.Run)
	p.add(r, registered)
	cp.nodePathDone.Go(func() {
		if err := r.Run(nodeCtx); err != nil {
			log.Error("in-process node path stopped", "err", err)
		}
	})
	select {
	case err := <-registered:
		if err != nil {
			return fmt.Errorf("register the in-process node: %w", err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Start runs the control plane's background work and blocks until ctx
// ends (or Close is called): it collects unreferenced snapshots (which
// reads every actor, so it runs while the API serves rather than growing
// start-up with their number) and runs the expiry sweep every
// ExpiryInterval until then. When ctx ends it cancels the
// collection and returns nil. A failed collection is logged, not returned: the next
// start retries it. Start may be called once; the API serves without it,
// only without the collection.
func (cp *ControlPlane) Start(ctx context.Context) error {
	if !cp.started.CompareAndSwap(false, true) {
		return errors.New("control plane started twice")
	}
	defer cp.stopBackground()
	// Close ends it too.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(cp.background, cancel)()
	r := runner.New(cp.log)
	r.Add("snapshot collection", func(ctx context.Context) error {
		defer close(cp.snapshotGCEnded)
		var once sync.Once
		firstPassDone := func() { once.Do(func() { close(cp.snapshotGCDone) }) }
		defer firstPassDone()
		if cp.sharedWithOthers {
			// Another control plane's snapshot may be committed and not
			// yet recorded (a golden build, a suspend): one pass would
			// take it as an orphan.
			return cp.Lifecycle.CollectOrphans(ctx, lifecycle.OrphanCollection{
				Shared: true, CheckpointTimeout: nodeagent.CheckpointTimeout, FirstPassDone: firstPassDone})
		}
		start := time.Now()
		// Alone over the store, and the node is in this process: a
		// predecessor's workflows died with it, so one pass finds every
		// orphan.
		defer cp.Lifecycle.ForgetMinted()
		if err := cp.Lifecycle.CollectGarbage(ctx); err != nil && ctx.Err() == nil {
			cp.log.Warn("snapshot garbage collection", "err", err)
			return nil
		}
		cp.log.Debug("snapshot garbage collection done", "duration", time.Since(start))
		return nil
	})
	r.Add("expiry", func(ctx context.Context) error { _ = cp.Lifecycle.RunExpiry(ctx, cp.expiryInterval); return nil })
	// Alarms fire while the API serves and stop with the front, before
	// shutdown suspends every actor, so none is woken during it.
	r.Add("alarms", func(ctx context.Context) error { _ = cp.Alarms.Run(ctx); return nil })
	r.Add("identity keys", func(ctx context.Context) error { _ = cp.Identity.Run(ctx); return nil })
	r.Add("actor counts", func(ctx context.Context) error { _ = cp.metrics.RunActorCounts(ctx, cp.Store, cp.log); return nil })
	return r.Run(ctx)
}

// PartitionNode, while cut, holds everything the in-process node sends
// the registry (nodeagent.InProcess.Partition): a test hook for a node
// that stands still or is cut off, which the registry must treat as it
// treats a remote one.
func (cp *ControlPlane) PartitionNode(cut bool) { cp.nodePath.Partition(cut) }

// NewGRPCServer returns a gRPC server serving cp's Control API
// (newAPIGRPCServer) with opts (the authorisation interceptors).
func (cp *ControlPlane) NewGRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	gs, initMetrics := newAPIGRPCServer(cp.metrics, opts...)
	atev1.RegisterControlServer(gs, cp.API)
	initMetrics()
	return gs
}

// newAPIGRPCServer returns the API server's gRPC server, services not yet
// registered, counting calls in ms (nil: not); initMetrics exports every
// registered method at zero.  Its handlers run on a pool of long-lived goroutines (one
// per CPU; more are started while all are busy) rather than a new
// goroutine per call, whose stack grew anew on every call (BENCHMARKS.md,
// Control plane: Wake-up throughput). Connections are aged out after
// apidial.MaxConnectionAge so clients that resolve replicas by DNS find
// ones added later; a node's registration stream cut that way reconnects
// within a second, well inside its loss deadline.
func newAPIGRPCServer(ms *metrics.Metrics, opts ...grpc.ServerOption) (gs *grpc.Server, initMetrics func()) {
	return grpcServer(ms, append([]grpc.ServerOption{grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0)))}, opts...)...)
}

// SnapshotGCDone is closed once the snapshot garbage collection that
// Start runs has made its first pass (it reads every actor). Alone over
// its store that is the whole collection; over a store shared with
// other control planes, later passes take what stayed unreferenced for
// lifecycle.OrphanCollection's window.
func (cp *ControlPlane) SnapshotGCDone() <-chan struct{} { return cp.snapshotGCDone }

// Close shuts the node down (destroying every sandbox, tearing its slots
// down) and closes the store. It does not suspend running actors first.
// It ends Start's background work first and waits for the snapshot
// collection; the installation lease is released last, before the store
// closes.
func (cp *ControlPlane) Close() error {
	cp.stopBackground()
	if cp.started.Load() {
		<-cp.snapshotGCEnded
	}
	if cp.Lifecycle != nil {
		cp.Lifecycle.Close()
	}
	if cp.stopNodePath != nil {
		cp.stopNodePath()
		cp.nodePathDone.Wait()
	}
	if cp.Registry != nil {
		cp.Registry.Close()
	}
	if cp.Node != nil {
		cp.Node.Shutdown(context.Background())
	}
	if cp.installation != nil {
		cp.stopRenewal()
		cp.renewalDone.Wait()
		// Bounded: a database that does not answer must not hold the
		// exit; an unreleased lease only expires a little later.
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		_ = cp.installation.Release(ctx)
		cancel()
	}
	if cp.Store != nil {
		return cp.Store.Close()
	}
	return nil
}
