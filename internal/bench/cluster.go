// Package bench measures the control plane: it wires, in one process, what
// `ate up` wires — a bbolt store, durable and paused snapshot stores, a node
// agent with N workers, the lifecycle manager and the API server behind a
// real gRPC server on loopback — but with the in-process fake sandbox
// (internal/sandbox/fake) instead of runsc, so what is measured is the
// control plane's own cost: gRPC, validation, leases, store transactions
// (each fsync'd), the node's image/snapshot/identity bookkeeping and its
// wakeup probe over loopback TCP.
//
// The benchmarks live in this package's _test files; BENCHMARKS.md
// ("Control plane (fake sandbox)") lists them, how to run them and what
// they measured. The router and the worker tunnel are not part of the
// measured path (the router has its own tests and the tunnel only forwards
// bytes once an actor runs).
package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/sandbox/fake"
	"substrate.dev/ate/internal/up"
)

// Config configures a Cluster.
type Config struct {
	// Dir is the data directory; it must exist. A store file already in
	// it (see Preload) is used as it is, as `ate up` would after a
	// restart.
	Dir string
	// Workers is the number of worker slots of the one node.
	Workers int
	// Fake configures the sandbox runtime (its per-operation delays).
	Fake fake.Config
	// Logger receives every component's logs; nil discards them, which
	// keeps logging's cost out of the numbers.
	Logger *slog.Logger
	// Store is the record store's URL; empty for a bbolt file in Dir.
	// Clusters over one PostgreSQL database are API server replicas:
	// give each its own NodeName and WorkerPrefix and one SnapshotsDir.
	Store, NodeName, WorkerPrefix, SnapshotsDir string
	// Heartbeat and LostAfter are the node registry's
	// (up.ControlPlaneConfig); zero for its defaults.
	Heartbeat, LostAfter time.Duration
}

// Cluster is a running all-in-one installation over the fake sandbox
// class. Its exported fields are for the caller to use, not replace; Close
// stops everything. Safe for concurrent use (as its parts are).
type Cluster struct {
	// ControlPlane's parts (Store, Node, Snapshots…) are there for setup
	// and inspection that the API does not offer.
	*up.ControlPlane
	// Client talks to the API server over gRPC on loopback.
	Client  atev1.ControlClient
	Runtime *fake.Runtime
	// DBPath is the store file.
	DBPath string
	// Started is how long Start took: opening the store, registering
	// workers, reading templates. The snapshot garbage collection, which
	// reads every actor, runs after it in the background (SnapshotGCDone).
	Started time.Duration

	cancel context.CancelFunc
	// started receives ControlPlane.Start's result; nil until it runs.
	started chan error
	gs      *grpc.Server
	served  chan error
	conn    *grpc.ClientConn
}

// Start builds a Cluster with up.NewControlPlane, exactly as `ate up`
// builds its control plane, with fake.Runtime and fake.Setup in place of
// runsc and network namespaces, and serves its API over gRPC.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if cfg.Dir == "" || cfg.Workers < 1 {
		return nil, errors.New("bench: Config.Dir and at least one worker are required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	began := time.Now()
	// The cluster's own context outlives ctx (which only bounds Start):
	// the control plane's background work (golden builds, the snapshot
	// collection) runs until it ends.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	// A local, not the named result: `return nil, err` clears the result
	// before the deferred Close runs.
	c := &Cluster{cancel: cancel, DBPath: filepath.Join(cfg.Dir, up.DBName)}
	defer func() {
		if err != nil {
			_ = c.Close()
		}
	}()
	c.Runtime = fake.New(cfg.Fake)
	c.ControlPlane, err = up.NewControlPlane(ctx, up.ControlPlaneConfig{
		DataDir: cfg.Dir, Logger: log, Store: cfg.Store, SnapshotsDir: cfg.SnapshotsDir, Heartbeat: cfg.Heartbeat, LostAfter: cfg.LostAfter,
		Node: node.Config{
			Name:    cfg.NodeName,
			Workers: cfg.Workers, WorkerPrefix: cmp.Or(cfg.WorkerPrefix, "bench"), SandboxClass: fake.Class,
			Runtime: c.Runtime, Setup: fake.Setup,
			// No tunnel serves here; workers record where it would be.
			TunnelAddr: "127.0.0.1:0",
		},
	})
	if err != nil {
		return nil, err
	}
	c.started = make(chan error, 1)
	go func() { c.started <- c.ControlPlane.Start(runCtx) }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("api listen: %w", err)
	}
	c.gs = c.NewGRPCServer()
	c.served = make(chan error, 1)
	go func() { c.served <- c.gs.Serve(ln) }()
	if c.conn, err = grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		return nil, err
	}
	c.Client = atev1.NewControlClient(c.conn)
	c.Started = time.Since(began)
	return c, nil
}

// Close stops the API server, then the control plane (destroying every
// sandbox, closing the store). Actors still running are not suspended first (`ate
// up` would); a benchmark's data directory is thrown away.
func (c *Cluster) Close() error {
	var errs []error
	if c.conn != nil {
		errs = append(errs, c.conn.Close())
	}
	if c.gs != nil {
		c.gs.Stop()
		if err := <-c.served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			errs = append(errs, fmt.Errorf("api server: %w", err))
		}
	}
	c.cancel()
	if c.started != nil {
		errs = append(errs, <-c.started)
	}
	if c.ControlPlane != nil {
		errs = append(errs, c.ControlPlane.Close())
	}
	if c.Runtime != nil {
		errs = append(errs, c.Runtime.Close())
	}
	return errors.Join(errs...)
}
