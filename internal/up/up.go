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
	"substrate.dev/ate/internal/cli"
	"substrate.dev/ate/internal/httpserve"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/netns"
	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/router"
	"substrate.dev/ate/internal/sandbox"
	"substrate.dev/ate/internal/sandbox/fake"
	"substrate.dev/ate/internal/sandbox/gvisor"
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
	ParkGrace   time.Duration
	// DrainDelay and DrainTimeout shape the router's drain on shutdown
	// (httpserve.Server).
	DrainDelay   time.Duration
	DrainTimeout time.Duration
	RunscPath    string
	// SandboxClass is "gvisor" (default) or "fake".
	SandboxClass string
	// WorkerPrefix names this node's network namespaces and workers;
	// empty derives one from DataDir so two installations never collide.
	WorkerPrefix string
	// NoStandbys turns off the sandboxes free workers prepare ahead of
	// the next start (node.Config.NoStandbys).
	NoStandbys bool
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
	rt, setup, teardown, closeRT, err := sandboxClass(cfg, log)
	if err != nil {
		return err
	}
	defer closeRT()

	// The tunnel must listen before the node exists (workers record its
	// address) and serve the node's handler once it does.
	var tunnel http.Handler
	ts := httpserve.NewServer("worker-tunnel", cfg.TunnelAddr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tunnel.ServeHTTP(w, r)
	}), log)
	if err := ts.Listen(); err != nil {
		return fmt.Errorf("tunnel: %w", err)
	}
	cp, err := NewControlPlane(ctx, ctx, ControlPlaneConfig{
		DataDir: dataDir, Workers: cfg.Workers, WorkerPrefix: cfg.WorkerPrefix, SandboxClass: cfg.SandboxClass,
		Runtime: rt, Setup: setup, Teardown: teardown, TunnelAddr: ts.Addr(), Logger: log,
		NoStandbys: cfg.NoStandbys,
	})
	if err != nil {
		return err
	}
	defer cp.Close()
	nd, lc := cp.Node, cp.Lifecycle

	apiLn, err := net.Listen("tcp", cfg.APIAddr)
	if err != nil {
		return fmt.Errorf("api listen: %w", err)
	}
	gs := cp.NewGRPCServer()

	conn, err := grpc.NewClient(apiLn.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := atev1.NewControlClient(conn)
	res := router.NewControlResolver(client, log)
	rh := router.NewHandler(router.Config{ActorDomain: cfg.ActorDomain, ParkMax: cfg.ParkMax, ParkBudget: cfg.ParkBudget,
		ParkGrace: cfg.ParkGrace, Idler: res, Activity: res}, res, log)
	rs := httpserve.NewServer("router", cfg.RouterAddr, rh, log)
	rs.DrainDelay, rs.DrainTimeout = cfg.DrainDelay, cfg.DrainTimeout
	if err := rs.Listen(); err != nil {
		return err
	}
	tunnel = nd.NewTunnel()

	info := Info{APIAddr: apiLn.Addr().String(), RouterAddr: rs.Addr(), ConfigPath: filepath.Join(dataDir, "config.yaml")}
	if err := cli.WriteConfig(info.ConfigPath, cli.Config{Server: info.APIAddr}); err != nil {
		return err
	}

	parts := serving{api: gs, apiLn: apiLn, tunnel: ts, router: rs, routes: rh, lc: lc, node: nd, log: log}
	return parts.serve(ctx, func(ctx context.Context) error {
		log.Info("ate up ready", "api", info.APIAddr, "router", info.RouterAddr, "workers", cfg.Workers,
			"dataDir", dataDir, "config", info.ConfigPath)
		if cfg.Demo {
			if err := demo(ctx, client, cfg.DemoTemplate, info, log); err != nil {
				return fmt.Errorf("demo: %w", err)
			}
		}
		if cfg.Ready != nil {
			cfg.Ready(info)
		}
		return nil
	})
}

// serving is what Run starts once everything is built.
type serving struct {
	api    *grpc.Server
	apiLn  net.Listener
	tunnel *httpserve.Server
	router *httpserve.Server
	routes *router.Handler
	lc     *lifecycle.Manager
	node   *node.Node
	log    *slog.Logger
}

// serve runs every server until ctx ends (or one fails), then shuts down
// in order: the router drains first while the API server, the node and
// its tunnel keep working — parked requests still need resumes, other
// clients may suspend actors meanwhile, and the router's idle loop keeps
// freeing workers; then every running actor is suspended; then the API
// server and the tunnel stop. ready runs once all serve; an error from it
// stops everything.
func (s serving) serve(ctx context.Context, ready func(context.Context) error) error {
	base, stopServices := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServices()
	services, svcCtx := errgroup.WithContext(base)
	services.Go(func() error { return serveGRPC(svcCtx, s.api, s.apiLn) })
	services.Go(func() error { return s.tunnel.Start(svcCtx) })
	// Actors' requests for their own suspension.
	services.Go(func() error { return s.node.ServeSelfService(svcCtx, s.lc.SelfRequest) })

	// The router stops when ctx ends or a service fails.
	rctx, stopRouter := context.WithCancel(ctx)
	defer stopRouter()
	stopAfter := context.AfterFunc(svcCtx, stopRouter)
	defer stopAfter()
	loopCtx, stopLoop := context.WithCancel(context.WithoutCancel(ctx))
	loopDone := make(chan error, 1)
	go func() { loopDone <- s.routes.Start(loopCtx) }()
	front, fctx := errgroup.WithContext(rctx)
	front.Go(func() error { return s.router.Start(fctx) })
	front.Go(func() error { return ready(fctx) })
	err := front.Wait()
	stopLoop()
	if lerr := <-loopDone; err == nil {
		err = lerr
	}

	// Traffic has stopped; checkpoint what runs so a restart loses
	// nothing. Workers freed now need no standby.
	s.node.StopStandbys()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownSuspendTimeout)
	defer cancel()
	if serr := s.lc.SuspendAll(sctx); serr != nil {
		s.log.Warn("suspend on shutdown", "err", serr)
	}
	stopServices()
	if serr := services.Wait(); err == nil {
		err = serr
	}
	if errors.Is(err, context.Canceled) {
		err = nil
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

// sandboxClass builds the runtime of cfg.SandboxClass and its slot setup.
func sandboxClass(cfg Config, log *slog.Logger) (sandbox.Runtime, node.SlotSetup, node.SlotTeardown, func(), error) {
	switch cfg.SandboxClass {
	case "gvisor":
		rt, err := gvisor.New(gvisor.Config{RunscPath: cfg.RunscPath, RootDir: filepath.Join("/run/ate", cfg.WorkerPrefix), Logger: log})
		if err != nil {
			return nil, nil, nil, nil, err
		}
		return rt, netns.Ensure, netns.Remove, func() { _ = rt.Close() }, nil
	case fake.Class:
		// In-process stand-ins that emulate the counter: for trying the
		// control plane without root or runsc, and for benchmarks.
		rt := fake.New(fake.Config{})
		return rt, fake.Setup, nil, func() { _ = rt.Close() }, nil
	default:
		return nil, nil, nil, nil, fmt.Errorf("unknown sandbox class %q: use gvisor or fake", cfg.SandboxClass)
	}
}
