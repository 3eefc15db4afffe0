// Package up wires the all-in-one installation (`ate up`): API server over
// an embedded bbolt store, a node agent with local workers and its worker
// tunnel, and the router, in one process.
package up

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/apiserver"
	"substrate.dev/ate/internal/cli"
	"substrate.dev/ate/internal/image"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/netns"
	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/router"
	"substrate.dev/ate/internal/sandbox/gvisor"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/store/bolt"
)

// Config is `ate up`'s configuration.
type Config struct {
	DataDir    string
	Workers    int
	APIAddr    string
	RouterAddr string
	// TunnelAddr is where the worker tunnel listens; port 0 picks one.
	TunnelAddr  string
	ActorDomain string
	ParkMax     int
	ParkBudget  time.Duration
	RunscPath   string
	// WorkerPrefix names this node's network namespaces and workers;
	// empty derives one from DataDir so two installations never collide.
	WorkerPrefix string
	// Demo creates the template in DemoTemplate and actor counter-1.
	Demo         bool
	DemoTemplate string
	Logger       *slog.Logger
	// Ready, if set, is called once every component serves.
	Ready func(Info)
}

// Info tells a caller where the running installation listens.
type Info struct {
	APIAddr, RouterAddr, ConfigPath string
}

// Run starts everything and blocks until ctx ends, then stops it all.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if cfg.WorkerPrefix == "" {
		sum := sha256.Sum256([]byte(dataDir))
		cfg.WorkerPrefix = "ate" + hex.EncodeToString(sum[:3])
	}
	st, err := bolt.Open(filepath.Join(dataDir, "ate.db"), 5*time.Second)
	if err != nil {
		return fmt.Errorf("%w (is another `ate up` using %s?)", err, dataDir)
	}
	defer st.Close()
	if err := apiserver.EnsureDefaultAtespace(ctx, st); err != nil {
		return err
	}
	snaps, err := snapshot.NewLocal(filepath.Join(dataDir, "snapshots"))
	if err != nil {
		return err
	}
	// Paused checkpoints stay on this node's disk, apart from the
	// durable store (which would be S3 or shared storage in a cluster).
	paused, err := snapshot.NewLocal(filepath.Join(dataDir, "node", "paused"))
	if err != nil {
		return err
	}
	rt, err := gvisor.New(gvisor.Config{RunscPath: cfg.RunscPath, RootDir: filepath.Join("/run/ate", cfg.WorkerPrefix), Logger: log})
	if err != nil {
		return err
	}
	defer rt.Close()

	// The tunnel must listen before the node exists (workers record its
	// address) and serve the node's handler once it does.
	var tunnel http.Handler
	ts := router.NewServer(cfg.TunnelAddr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tunnel.ServeHTTP(w, r)
	}), log)
	if err := ts.Listen(); err != nil {
		return fmt.Errorf("tunnel: %w", err)
	}
	nd, err := node.New(ctx, node.Config{
		Name: "local", Workers: cfg.Workers, WorkerPrefix: cfg.WorkerPrefix, SandboxClass: "gvisor",
		Runtime: rt, Setup: netns.Ensure, Images: image.NewCache(filepath.Join(dataDir, "images"), log),
		Snapshots: snaps, Paused: paused, StateDir: filepath.Join(dataDir, "node"), TunnelAddr: ts.Addr(), Logger: log,
	})
	if err != nil {
		return err
	}
	defer nd.Shutdown(context.WithoutCancel(ctx))
	for _, w := range nd.Workers() {
		if err := st.PutWorker(ctx, w); err != nil {
			return fmt.Errorf("register worker %s: %w", w.Name, err)
		}
	}
	holder, _ := os.Hostname()
	lc := lifecycle.New(st, nd, snaps, fmt.Sprintf("%s/%d", holder, os.Getpid()), log)
	nd.SetExitHandler(lc.WorkerExited)
	if err := lc.Recover(ctx); err != nil {
		return fmt.Errorf("recover: %w", err)
	}

	apiLn, err := net.Listen("tcp", cfg.APIAddr)
	if err != nil {
		return fmt.Errorf("api listen: %w", err)
	}
	gs := grpc.NewServer()
	atev1.RegisterControlServer(gs, apiserver.New(ctx, st, lc, "gvisor", log))

	conn, err := grpc.NewClient(apiLn.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := atev1.NewControlClient(conn)
	rh := router.NewHandler(router.Config{ActorDomain: cfg.ActorDomain, ParkMax: cfg.ParkMax, ParkBudget: cfg.ParkBudget},
		router.NewControlResolver(client), log)
	rs := router.NewServer(cfg.RouterAddr, rh, log)
	if err := rs.Listen(); err != nil {
		return err
	}
	tunnel = nd.NewTunnel()

	info := Info{APIAddr: apiLn.Addr().String(), RouterAddr: rs.Addr(), ConfigPath: filepath.Join(dataDir, "config.yaml")}
	if err := cli.WriteConfig(info.ConfigPath, cli.Config{Server: info.APIAddr}); err != nil {
		return err
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serveGRPC(gctx, gs, apiLn) })
	g.Go(func() error { return rs.Start(gctx) })
	g.Go(func() error { return ts.Start(gctx) })
	g.Go(func() error {
		log.Info("ate up ready", "api", info.APIAddr, "router", info.RouterAddr, "workers", cfg.Workers,
			"dataDir", dataDir, "config", info.ConfigPath)
		if cfg.Demo {
			if err := demo(gctx, client, cfg.DemoTemplate, info, log); err != nil {
				return fmt.Errorf("demo: %w", err)
			}
		}
		if cfg.Ready != nil {
			cfg.Ready(info)
		}
		return nil
	})
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	// Traffic has stopped; checkpoint what runs so a restart loses nothing.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownSuspendTimeout)
	defer cancel()
	if serr := lc.SuspendAll(sctx); serr != nil {
		log.Warn("suspend on shutdown", "err", serr)
	}
	return err
}

// shutdownSuspendTimeout bounds suspending running actors on shutdown; a
// checkpoint of a small actor takes ~0.15 s (BENCHMARKS.md).
const shutdownSuspendTimeout = 60 * time.Second

// serveGRPC serves until ctx ends, then stops gracefully.
func serveGRPC(ctx context.Context, gs *grpc.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("api server: %w", err)
	case <-ctx.Done():
		stopped := make(chan struct{})
		go func() { gs.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			gs.Stop()
		}
		return nil
	}
}
