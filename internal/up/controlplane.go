package up

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"time"

	"google.golang.org/grpc"

	atev1 "substrate.dev/ate/api/ate/v1"

	"substrate.dev/ate/internal/apiserver"
	"substrate.dev/ate/internal/image"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/sandbox"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/store/bolt"
)

// ControlPlaneConfig says what NewControlPlane builds.
type ControlPlaneConfig struct {
	// DataDir is absolute and exists; it holds ate.db, snapshots/,
	// images/ and node/.
	DataDir string
	Workers int
	// WorkerPrefix names the workers and their namespaces.
	WorkerPrefix string
	SandboxClass string
	Runtime      sandbox.Runtime
	Setup        node.SlotSetup
	Teardown     node.SlotTeardown
	// TunnelAddr is where the worker tunnel listens (recorded on workers).
	TunnelAddr string
	Logger     *slog.Logger
	// NoStandbys turns the node's standby sandboxes off.
	NoStandbys bool
}

// ControlPlane is everything of `ate up` but the listeners: the embedded
// store, the snapshot stores, the node agent with its workers registered,
// the lifecycle manager (recovered) and the API server implementation.
// `ate up` and the control-plane benchmarks build it the same way.
type ControlPlane struct {
	Store     *bolt.Store
	Snapshots *snapshot.Local
	Node      *node.Node
	Lifecycle *lifecycle.Manager
	API       *apiserver.Server

	// stopSnapshotGC ends the background snapshot garbage collection;
	// snapshotGCDone is closed when it has returned.
	stopSnapshotGC context.CancelFunc
	snapshotGCDone chan struct{}
}

// DBName is the store file in the data directory.
const DBName = "ate.db"

// NewControlPlane builds and recovers a control plane. runCtx bounds what
// keeps running in the background (exit watchers, snapshot collection); ctx only
// the building. Errors leave nothing open.
func NewControlPlane(ctx, runCtx context.Context, cfg ControlPlaneConfig) (_ *ControlPlane, err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// A local, not the named result: `return nil, err` clears the result
	// before the deferred Close runs.
	cp := &ControlPlane{}
	defer func() {
		if err != nil {
			cp.Close()
		}
	}()
	if cp.Store, err = bolt.Open(filepath.Join(cfg.DataDir, DBName), 5*time.Second); err != nil {
		return nil, fmt.Errorf("%w (is another `ate up` using %s?)", err, cfg.DataDir)
	}
	if err := apiserver.EnsureDefaultAtespace(ctx, cp.Store); err != nil {
		return nil, err
	}
	if cp.Snapshots, err = snapshot.NewLocal(filepath.Join(cfg.DataDir, "snapshots")); err != nil {
		return nil, err
	}
	// Paused checkpoints stay on this node's disk, apart from the
	// durable store (which would be S3 or shared storage in a cluster).
	paused, err := snapshot.NewLocal(filepath.Join(cfg.DataDir, "node", "paused"))
	if err != nil {
		return nil, err
	}
	images := image.NewCache(filepath.Join(cfg.DataDir, "images"), log)
	cp.Node, err = node.New(runCtx, node.Config{
		Name: "local", Workers: cfg.Workers, WorkerPrefix: cfg.WorkerPrefix, SandboxClass: cfg.SandboxClass,
		Runtime: cfg.Runtime, Setup: cfg.Setup, Teardown: cfg.Teardown, Images: images,
		Snapshots: cp.Snapshots, Paused: paused, StateDir: filepath.Join(cfg.DataDir, "node"), TunnelAddr: cfg.TunnelAddr, Logger: log,
		NoStandbys: cfg.NoStandbys,
	})
	if err != nil {
		return nil, err
	}
	for _, w := range cp.Node.Workers() {
		if err := cp.Store.PutWorker(ctx, w); err != nil {
			return nil, fmt.Errorf("register worker %s: %w", w.Name, err)
		}
	}
	// The embedded store has exactly one API server (bbolt's file lock
	// sees to that), so it needs no store leases: the in-process lock
	// serialises workflows, and a restarted process never waits out a
	// dead predecessor's lease.
	cp.Lifecycle = lifecycle.New(cp.Store, cp.Node, cp.Snapshots, "", log)
	cp.Node.SetExitHandler(cp.Lifecycle.WorkerExited)
	cp.Node.SetIdleHandler(cp.Lifecycle.WorkerIdle)
	recovered := time.Now()
	if err := cp.Lifecycle.Recover(runCtx); err != nil {
		return nil, fmt.Errorf("recover: %w", err)
	}
	cp.API = apiserver.New(cp.Store, cp.Lifecycle, cfg.SandboxClass, images, log)
	// Garbage collection reads every actor; it runs while the API serves
	// so that start-up does not grow with their number.
	snapshotGCCtx, stopSnapshotGC := context.WithCancel(runCtx)
	cp.stopSnapshotGC, cp.snapshotGCDone = stopSnapshotGC, make(chan struct{})
	go func() {
		defer close(cp.snapshotGCDone)
		start := time.Now()
		if err := cp.Lifecycle.CollectGarbage(snapshotGCCtx, recovered); err != nil && snapshotGCCtx.Err() == nil {
			log.Warn("snapshot garbage collection", "err", err)
			return
		}
		log.Debug("snapshot garbage collection done", "duration", time.Since(start))
	}()
	return cp, nil
}

// NewGRPCServer returns a gRPC server serving cp's Control API. Its
// handlers run on a pool of long-lived goroutines (one per CPU; more are
// started while all are busy) rather than a new goroutine per call, whose
// stack grew anew on every call (BENCHMARKS.md, Control plane: Wake-up
// throughput).
func (cp *ControlPlane) NewGRPCServer() *grpc.Server {
	gs := grpc.NewServer(grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))))
	atev1.RegisterControlServer(gs, cp.API)
	return gs
}

// SnapshotGCDone is closed once the background snapshot garbage
// collection that NewControlPlane started has finished (it reads every
// actor).
func (cp *ControlPlane) SnapshotGCDone() <-chan struct{} { return cp.snapshotGCDone }

// Close shuts the node down (destroying every sandbox, tearing its slots
// down) and closes the store. It does not suspend running actors first.
func (cp *ControlPlane) Close() error {
	if cp.stopSnapshotGC != nil {
		cp.stopSnapshotGC()
		<-cp.snapshotGCDone
	}
	if cp.Lifecycle != nil {
		cp.Lifecycle.Close()
	}
	if cp.Node != nil {
		cp.Node.Shutdown(context.Background())
	}
	if cp.Store != nil {
		return cp.Store.Close()
	}
	return nil
}
