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
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/metrics"
	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/nodeagent"
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
}

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
	// installation renews the installation lease (Exclusive) until the
	// background work stops; nil without one.
	installation       *sync.WaitGroup
	installationHolder string

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
	// recovered is when Recover began; the snapshot collection only
	// takes snapshots staged before it.
	recovered time.Time
	// background bounds recovery and Start's wait: it lives from
	// NewControlPlane until Start's context ends or Close, whichever
	// comes first. stopBackground cancels it. Golden builds belong to
	// the lifecycle manager, whose Close (in ours) ends them.
	background     context.Context
	stopBackground context.CancelFunc
	// snapshotGCDone is closed when Start's snapshot collection has
	// returned.
	snapshotGCDone chan struct{}
	started        atomic.Bool
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
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// A local, not the named result: `return nil, err` clears the result
	// before the deferred Close runs.
	cp := &ControlPlane{log: log, snapshotGCDone: make(chan struct{}), expiryInterval: cfg.ExpiryInterval, metrics: cfg.Metrics}
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
	opened, err := openStore(ctx, cfg.Store, storeurl.Options{DefaultPath: filepath.Join(cfg.DataDir, DBName), Logger: log}, log)
	if err != nil {
		return nil, err
	}
	cp.Store = opened.Store
	observeCommits(cp.Store, cfg.Metrics)
	if opened.Shared && cfg.Exclusive {
		if err := cp.takeInstallation(ctx, cfg.DataDir, orDefault(cfg.Node.Name, DefaultNodeName)); err != nil {
			return nil, err
		}
	}
	if err := apiserver.EnsureDefaultAtespace(ctx, cp.Store); err != nil {
		return nil, err
	}
	if cp.Snapshots, err = snapshot.NewLocalWith(orDefault(cfg.SnapshotsDir, filepath.Join(cfg.DataDir, "snapshots")), snapshot.LocalOptions{Compress: true}); err != nil {
		return nil, err
	}
	// Paused checkpoints stay on this node's disk, apart from the
	// durable snapshot store (which would be S3 or shared storage in a cluster).
	paused, err := snapshot.NewLocal(filepath.Join(cfg.DataDir, "node", "paused"))
	if err != nil {
		return nil, err
	}
	images, err := newImageCache(cfg.DataDir, cfg.ImageRoots, cfg.RegistryCredentials, log)
	if err != nil {
		return nil, err
	}
	ceilings, err := cfg.Ceilings.apiCeilings(ctx, log, cfg.Store)
	if err != nil {
		return nil, err
	}
	nc := cfg.Node
	nc.Name = orDefault(nc.Name, DefaultNodeName)
	nc.EgressCeiling = ceilings.Egress
	nc.Images, nc.Snapshots, nc.Paused, nc.StateDir = images, cp.Snapshots, paused, filepath.Join(cfg.DataDir, "node")
	if nc.Logger == nil {
		nc.Logger = log
	}
	if cfg.Metrics != nil {
		nc.Metrics = cfg.Metrics.Node
	}
	// The node detaches its own background work (exit watchers) from
	// ctx and ends it at Shutdown (Close).
	if cp.Node, err = node.New(ctx, nc); err != nil {
		return nil, err
	}
	// Until the registry welcomes it, the node serves nothing it was not
	// given, as any node (RunNode).
	cp.Node.Fence(true)
	cp.nodePath = nodeagent.NewInProcess()
	if cp.Registry, err = nodeagent.NewRegistry(ctx, nodeagent.RegistryConfig{Store: cp.Store, Heartbeat: cfg.Heartbeat, LostAfter: cfg.LostAfter,
		Dial: cp.nodePath.DialNode, Shared: opened.Shared, SandboxClass: nc.SandboxClass, Logger: log}); err != nil {
		return nil, err
	}
	// The embedded store has exactly one API server (bbolt's file lock
	// sees to that), so it needs no store leases: the in-process lock
	// serialises workflows, and a restarted process never waits out a
	// dead predecessor's lease. A shared store (PostgreSQL) may have
	// other API servers: leases fence them.
	holder := ""
	if opened.Shared {
		holder = replicaName()
	}
	cp.Lifecycle = lifecycle.New(cp.Store, cp.Registry, cp.Snapshots, holder, log)
	cp.Lifecycle.SetEvictionLimits(ceilings.Eviction)
	if cfg.Metrics != nil {
		cp.Lifecycle.SetMetrics(cfg.Metrics.Lifecycle)
	}
	cp.Registry.SetWorkflows(cp.Lifecycle)
	cp.recovered = time.Now()
	// Before the node registers: its sandboxes died with the previous
	// process, whatever the store says.
	if err := cp.Lifecycle.Recover(cp.background, nc.Name); err != nil {
		return nil, fmt.Errorf("recover: %w", err)
	}
	cp.API = apiserver.New(cp.Store, cp.Lifecycle, nc.SandboxClass, images, log)
	cp.API.SetCeilings(ceilings)
	cp.API.SetNodes(cp.Registry)
	ac := alarm.Config{Holder: orDefault(holder, "ate-up"), TunnelTLS: cfg.AlarmTunnelTLS}
	if cfg.Metrics != nil {
		ac.Metrics = cfg.Metrics.Alarms
	}
	cp.Alarms = alarm.New(cp.Store, cp.Lifecycle, ac, log)
	cp.API.SetAlarms(cp.Alarms)
	cp.Registry.SetSelfAlarmHandler(cp.Alarms.ServeSelf)
	cp.Identity = cfg.Identity.newIssuer(cp.Store, log)
	cp.Registry.SetSelfCallHandler(selfCalls(cp.Identity, cp.Lifecycle))
	if err := cp.startNodePath(ctx, nc, log); err != nil {
		return nil, err
	}
	return cp, nil
}

// startNodePath serves the node protocol in process and registers the
// node with the registry through its agent, returning once the
// registry has welcomed it (its registration re-registers its workers
// and unregisters those an earlier run had and this one has not:
// nodeagent.Registry.reconcile). It runs until Close.
func (cp *ControlPlane) startNodePath(ctx context.Context, nc node.Config, log *slog.Logger) error {
	var nodeCtx context.Context
	nodeCtx, cp.stopNodePath = context.WithCancel(context.WithoutCancel(ctx))
	agent := nodeagent.NewAgent(nodeagent.AgentConfig{Node: cp.Node, Replicas: cp.nodePath.Replicas, Dial: cp.nodePath.DialRegistry,
		Address: nodeagent.InProcessAddress, TunnelAddr: nc.TunnelAddr, SandboxClass: nc.SandboxClass, Logger: log})
	registered := make(chan error, 1)
	for _, run := range []func(context.Context) error{
		func(ctx context.Context) error {
			return cp.nodePath.Serve(ctx, cp.Registry, nodeagent.NewServer(cp.Node, agent))
		},
		cp.Registry.Run,
		func(ctx context.Context) error { return agent.Run(ctx, registered) },
		// Actors' requests for their own suspension.
		func(ctx context.Context) error { return cp.Node.ServeSelfService(ctx, agent.SelfRequest) },
	} {
		cp.nodePathDone.Go(func() {
			if err := run(nodeCtx); err != nil && nodeCtx.Err() == nil {
				log.Error("in-process node path stopped", "err", err)
			}
		})
	}
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
	gcCtx, stopGC := context.WithCancel(ctx)
	defer stopGC()
	go func() {
		defer close(cp.snapshotGCDone)
		start := time.Now()
		if err := cp.Lifecycle.CollectGarbage(gcCtx, cp.recovered); err != nil && gcCtx.Err() == nil {
			cp.log.Warn("snapshot garbage collection", "err", err)
			return
		}
		cp.log.Debug("snapshot garbage collection done", "duration", time.Since(start))
	}()
	expiryDone := make(chan struct{})
	go func() {
		defer close(expiryDone)
		_ = cp.Lifecycle.RunExpiry(gcCtx, cp.expiryInterval)
	}()
	// Alarms fire while the API serves and stop with the front, before
	// shutdown suspends every actor, so none is woken during it.
	alarmsDone := make(chan struct{})
	go func() {
		defer close(alarmsDone)
		_ = cp.Alarms.Run(gcCtx)
	}()
	identityDone := make(chan struct{})
	go func() {
		defer close(identityDone)
		_ = cp.Identity.Run(gcCtx)
	}()
	countsDone := make(chan struct{})
	go func() {
		defer close(countsDone)
		runActorCounts(gcCtx, cp.Store, cp.metrics, cp.log)
	}()
	select {
	case <-ctx.Done():
	case <-cp.background.Done(): // Close
	}
	stopGC()
	<-cp.snapshotGCDone
	<-expiryDone
	<-alarmsDone
	<-identityDone
	<-countsDone
	return nil
}

// installationLease is the store lease an Exclusive control plane holds,
// renewed every installationTTL/3.
const (
	installationLease = "installation/ate-up"
	installationTTL   = 15 * time.Second
)

// takeInstallation takes the installation lease for this data dir on
// this host (so a restarted `ate up` takes it back at once) and renews it
// until the control plane's background work stops. A database holding
// workers of nodes other than ours (nodeName) belongs to `ate apiserver`
// replicas and is refused too.
func (cp *ControlPlane) takeInstallation(ctx context.Context, dataDir, nodeName string) error {
	host, _ := os.Hostname()
	holder := host + ":" + dataDir
	lease, err := cp.Store.AcquireLease(ctx, installationLease, holder, installationTTL)
	if errors.Is(err, store.ErrLeaseHeld) {
		return fmt.Errorf("another `ate up` uses this database (%w): `ate up` keeps its snapshots in its own data dir, so two cannot share a store; "+
			"run `ate apiserver` replicas over it instead (docs/ha.md)", err)
	}
	if err != nil {
		return fmt.Errorf("take the installation lease: %w", err)
	}
	release := func() { _ = cp.Store.ReleaseLease(context.WithoutCancel(ctx), installationLease, holder) }
	workers, err := cp.Store.ListWorkers(ctx)
	if err != nil {
		release()
		return err
	}
	for _, w := range workers {
		if w.Node != nodeName {
			release()
			return fmt.Errorf("this database holds workers of node %s: it is used by `ate apiserver` replicas, and `ate up` needs a database of its own", w.Node)
		}
	}
	cp.installation, cp.installationHolder = &sync.WaitGroup{}, holder
	cp.installation.Go(func() {
		tick := time.NewTicker(installationTTL / 3)
		defer tick.Stop()
		for {
			select {
			case <-cp.background.Done():
				return
			case <-tick.C:
			}
			_, err := cp.Store.RenewLease(cp.background, installationLease, holder, lease.Token, installationTTL)
			switch {
			case err == nil, cp.background.Err() != nil:
			case errors.Is(err, store.ErrFenced):
				cp.log.Error("installation lease lost: another `ate up` may have taken this database over", "err", err)
				return
			default:
				cp.log.Warn("installation lease not renewed; retrying", "err", err)
			}
		}
	})
	return nil
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
// Start runs has finished (it reads every actor).
func (cp *ControlPlane) SnapshotGCDone() <-chan struct{} { return cp.snapshotGCDone }

// Close shuts the node down (destroying every sandbox, tearing its slots
// down) and closes the store. It does not suspend running actors first.
// It ends Start's background work first and waits for the snapshot
// collection.
func (cp *ControlPlane) Close() error {
	cp.stopBackground()
	if cp.installation != nil {
		cp.installation.Wait()
		_ = cp.Store.ReleaseLease(context.Background(), installationLease, cp.installationHolder)
	}
	if cp.started.Load() {
		<-cp.snapshotGCDone
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
	if cp.Store != nil {
		return cp.Store.Close()
	}
	return nil
}
