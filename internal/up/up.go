// Package up wires the all-in-one installation (`ate up`): API server over
// an embedded bbolt store, a node agent with local workers and its worker
// tunnel, and the router, in one process.
package up

import (
	"context"
	"crypto/x509"

	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/gofrs/flock"

	"google.golang.org/grpc"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/ateconfig"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/httpserve"
	"substrate.dev/ate/internal/metrics"
	"substrate.dev/ate/internal/netns"
	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/pki"
	"substrate.dev/ate/internal/runner"
	"substrate.dev/ate/internal/sandbox"
	"substrate.dev/ate/internal/sandbox/fake"
	"substrate.dev/ate/internal/sandbox/gvisor"
)

// Info tells a caller where the running installation listens.
type Info struct {
	APIAddr, RouterAddr, ConfigPath string
	// MetricsAddr is where the management listener serves; empty when
	// there is none.
	MetricsAddr string
	// DashboardURL is the web dashboard's address
	// ("http://127.0.0.1:7072/"); empty when there is none.
	DashboardURL string
}

// ClientConfigName is the client config file `ate up` writes in the data
// directory (internal/ateconfig).
const ClientConfigName = "config.yaml"

// Run starts everything and blocks until ctx ends, then stops it all.
func Run(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	log := cfg.Logger
	if cfg.Store, err = resolveStore(cfg.Store, cfg.StoreFile, log); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	flushTraces, err := startTracing(ctx, "ate-up", log)
	if err != nil {
		return err
	}
	defer flushTraces()
	rt, setup, teardown, closeRT, err := sandboxClass(cfg.Node, cfg.Gvisor, log)
	if err != nil {
		return err
	}
	defer closeRT()

	tr, err := newUpTransports(ctx, cfg, log)
	if err != nil {
		return err
	}

	// The tunnel must listen before the node exists (workers record its
	// address) and serve the node's handler once it does.
	var tunnel http.Handler
	ts := httpserve.NewServer("worker-tunnel", cfg.Tunnel.Addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tunnel.ServeHTTP(w, r)
	}), log)
	// The router proxies to it and the alarm scheduler delivers through it.
	ts.TLS = tr.node.HTTPServerConfig(auth.ComponentRouter, auth.ComponentAPIServer)
	if err := ts.Listen(); err != nil {
		return fmt.Errorf("tunnel: %w", err)
	}
	// Metrics are recorded only when something serves them: the
	// management listener, or the dashboard's latency chart.
	var ms *metrics.Metrics
	var mgmt *httpserve.Management
	if cfg.Metrics.Addr != "" || cfg.HTTP.Addr != "" {
		ms = metrics.New()
	}
	if cfg.Metrics.Addr != "" {
		if mgmt, err = newManagementServer(cfg.Metrics.Addr, ms, nil); err != nil {
			return err
		}
		defer mgmt.Close()
	}
	stopPprof, err := httpserve.StartPprof(ctx, cfg.Metrics.PprofAddr)
	if err != nil {
		return err
	}
	defer stopPprof()
	nc := cfg.Node
	nc.Runtime, nc.Setup, nc.Teardown, nc.TunnelAddr = rt, setup, teardown, ts.Addr()
	cp, err := NewControlPlane(ctx, ControlPlaneConfig{DataDir: cfg.DataDir, Store: cfg.Store, Exclusive: true, Node: nc, Logger: log, Metrics: ms, ImageRoots: cfg.ImageRoots, RegistryCredentials: cfg.RegistryCredentials, Ceilings: cfg.Ceilings,
		ExpiryInterval: cfg.API.ExpiryInterval, Identity: cfg.Identity, AlarmTunnelTLS: tr.api.HTTPClientConfig(auth.ComponentNode),
		Heartbeat: cfg.API.Heartbeat, LostAfter: cfg.API.LostAfter})
	if err != nil {
		return err
	}
	defer cp.Close()

	apiLn, err := net.Listen("tcp", cfg.API.Addr)
	if err != nil {
		return fmt.Errorf("api listen: %w", err)
	}
	// The API always checks callers: components by their certificates
	// (the in-process router's is tr.router's), users by the admin token
	// (written into the client config below) and whatever cfg.API.Auth
	// adds.
	adminToken, err := auth.EnsureAdminToken(cfg.DataDir)
	if err != nil {
		return err
	}
	ac := cfg.API.Auth
	ac.TrustDomain = tr.api.TrustDomain
	ac.extra = []auth.StaticToken{auth.AdminToken(adminToken)}
	if err := checkIssuers(ac, cfg.Identity); err != nil {
		return err
	}
	authz, err := newAuthorizer(ac, cp.Store, log)
	if err != nil {
		return err
	}
	if err := wireAuth(cp.API, authz, ac); err != nil {
		return err
	}
	cp.API.SetMaxStreamsPerCaller(cfg.API.MaxStreamsPerCaller)
	gs := cp.NewGRPCServer(append(tr.api.ServerOptions(pki.ClientCertOptional), authServerOptions(authz)...)...)

	conn, err := grpc.NewClient(apiLn.Addr().String(), append(inProcessDialOptions(ms), tr.router.DialOption(auth.ComponentAPIServer))...)
	if err != nil {
		return err
	}
	defer conn.Close()
	rp, err := newRouter(cfg.Router, atev1.NewControlClient(conn), tr.router, ms, log)
	if err != nil {
		return err
	}
	tunnel = cp.Node.NewTunnel()
	// The dashboard and the demo call the API as a client of the config
	// file does (ateconfig.DialOptions), not as the router: the dashboard
	// with each page's user's token (dashboard.RequireLogin), the demo
	// with the admin token, so every check the API makes applies to them.
	clientConfig := ateconfig.Config{Server: apiLn.Addr().String(), CertificateAuthority: tr.authority.CAFile()}
	dialAs := func(token string) (*grpc.ClientConn, error) {
		c := clientConfig
		c.Token = token
		opts, err := ateconfig.DialOptions(c)
		if err != nil {
			return nil, err
		}
		return grpc.NewClient(c.Server, append(inProcessDialOptions(ms), opts...)...)
	}
	var dash *dashboardServer
	if cfg.HTTP.Addr != "" {
		dconn, err := dialAs("")
		if err != nil {
			return err
		}
		defer dconn.Close()
		if dash, err = newDashboardServer(cfg.HTTP.Addr, atev1.NewControlClient(dconn), ms, nil, true, cp.Identity, log); err != nil {
			return err
		}
		if cfg.Identity.IssuerURL == "" {
			cp.Identity.SetIssuerURL(issuerURLFor(dash.srv.Addr()))
		}
	}

	info := Info{APIAddr: apiLn.Addr().String(), RouterAddr: rp.server.Addr(), ConfigPath: filepath.Join(cfg.DataDir, ClientConfigName)}
	if mgmt != nil {
		info.MetricsAddr = mgmt.Addr()
	}
	if dash != nil {
		info.DashboardURL = dash.URL()
	}
	clientConfig.Token = adminToken
	if err := ateconfig.Write(info.ConfigPath, clientConfig); err != nil {
		return err
	}

	parts := serving{api: gs, apiLn: apiLn, tunnel: ts, router: rp, cp: cp, mgmt: mgmt, dash: dash, log: log}
	return parts.serve(ctx, func(ctx context.Context) error {
		log.Info("ate up ready", "api", info.APIAddr, "router", info.RouterAddr, "workers", cfg.Node.Workers,
			"metrics", info.MetricsAddr, "dataDir", cfg.DataDir, "config", info.ConfigPath, "dashboard", info.DashboardURL)
		if info.DashboardURL != "" {
			fmt.Fprintf(os.Stdout, "Dashboard: %s\n", info.DashboardURL)
		}
		if cfg.Demo.Enabled {
			// The demo acts as the operator would, with the admin token.
			aconn, err := dialAs(adminToken)
			if err != nil {
				return err
			}
			defer aconn.Close()
			if err := demo(ctx, atev1.NewControlClient(aconn), cfg.Demo, info, log); err != nil {
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
	router routerParts
	cp     *ControlPlane
	// mgmt is the management listener; nil when there is none.
	mgmt *httpserve.Management
	// dash is the dashboard's listener; nil when there is none.
	dash *dashboardServer
	log  *slog.Logger
}

// serve runs every part until ctx ends (or one fails), then stops them
// in reverse order (runner.Runner): the router drains first, and the
// control plane's background work (golden builds, snapshot collection,
// alarms) stops, while the API server, the node and its tunnel keep
// working — parked requests still need resumes, other clients may
// suspend actors meanwhile, and the router's idle loop keeps freeing
// workers; then every running actor is suspended; then the dashboard,
// the API server, the tunnel and the management listener stop. ready
// runs once all serve; an error from it stops everything.
func (s serving) serve(ctx context.Context, ready func(context.Context) error) error {
	r := runner.New(s.log)
	if s.mgmt != nil {
		// Up until the very end, so the shutdown itself can be watched.
		r.Add("management", s.mgmt.Serve)
	}
	r.Add("worker tunnel", s.tunnel.Start)
	r.Add("api", func(ctx context.Context) error {
		// Watches and log follows would hold the graceful stop to its end.
		defer context.AfterFunc(ctx, s.cp.API.EndStreams)()
		return serveGRPC(ctx, s.api, s.apiLn)
	})
	if s.dash != nil {
		// Up with the API it calls, so shutdown's suspends show on it.
		r.Add("dashboard", s.dash.Start)
	}
	r.AddStop("suspend every actor", func(ctx context.Context) error {
		// Traffic has stopped; checkpoint what runs so a restart loses
		// nothing. Workers freed now need no standby.
		s.cp.Node.StopStandbys()
		ctx, cancel := context.WithTimeout(ctx, shutdownSuspendTimeout)
		defer cancel()
		if err := s.cp.Lifecycle.SuspendAll(ctx); err != nil {
			s.log.Warn("suspend on shutdown", "err", err)
		}
		return nil
	})
	// Background golden builds and the snapshot collection end with the
	// front, as new work is no longer wanted.
	r.Add("control plane", s.cp.Start)
	s.router.add(r)
	r.Add("ready", ready)
	return r.Run(ctx)
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

// sandboxClass builds the runtime of nc.SandboxClass and its slot setup.
func sandboxClass(nc node.Config, gc gvisor.Config, log *slog.Logger) (sandbox.Runtime, node.SlotSetup, node.SlotTeardown, func(), error) {
	class, err := sandbox.ParseClass(nc.SandboxClass)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	switch class {
	case sandbox.ClassGvisor:
		gc.RootDir, gc.Logger = filepath.Join("/run/ate", nc.WorkerPrefix), log
		// The worker prefix names this node's runsc root and network
		// namespaces on the machine; the node's start-up clears both of
		// what a dead predecessor left. A second process with the same
		// prefix (the same node started twice) would clear a live one's.
		lock := flock.New(gc.RootDir + ".lock")
		if err := os.MkdirAll(filepath.Dir(gc.RootDir), 0o700); err != nil {
			return nil, nil, nil, nil, err
		}
		if ok, err := lock.TryLock(); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("lock worker prefix %s: %w", nc.WorkerPrefix, err)
		} else if !ok || !lockIsPath(lock) {
			_ = lock.Unlock()
			return nil, nil, nil, nil, fmt.Errorf("worker prefix %s is in use by another ate process on this machine (the same --data-dir and --name, or the same --worker-prefix)", nc.WorkerPrefix)
		}
		rt, err := gvisor.New(gc)
		if err != nil {
			_ = os.Remove(lock.Path())
			_ = lock.Unlock()
			return nil, nil, nil, nil, err
		}
		// The lock file goes with the node, so a clean exit leaves nothing
		// under /run/ate; it is removed while still held, and a process
		// that locked the removed file in between sees (lockIsPath) that
		// its file is no longer the path's and refuses to start.
		return rt, netns.Ensure, netns.Remove, func() { _ = rt.Close(); _ = os.Remove(lock.Path()); _ = lock.Unlock() }, nil
	case sandbox.ClassFake:
		// In-process stand-ins that emulate the counter: for trying the
		// control plane without root or runsc, and for benchmarks.
		rt := fake.New(fake.Config{})
		return rt, fake.Setup, nil, func() { _ = rt.Close() }, nil
	default:
		// ParseClass accepts only the classes above.
		return nil, nil, nil, nil, fmt.Errorf("sandbox class %s: no runtime", class)
	}
}

// upTransports are `ate up`'s components' TLS, all from its in-process
// CA: every connection between them is mutual TLS, loopback included, so
// what runs on the machine (another user's process, an actor that found
// a way out) cannot call the API as the router or reach the tunnel.
type upTransports struct {
	authority         *pki.Authority
	api, node, router *pki.Transport
}

// newUpTransports opens <DataDir>/pki (creating the CA on first start)
// and issues the API server's, the node's and the router's leaves,
// logging each renewal.
func newUpTransports(ctx context.Context, cfg Config, log *slog.Logger) (upTransports, error) {
	a, err := pki.OpenAuthority(filepath.Join(cfg.DataDir, "pki"), cfg.PKI.TrustDomain, cfg.PKI.LeafTTL)
	if err != nil {
		return upTransports{}, err
	}
	tr := upTransports{authority: a}
	for _, c := range []struct {
		t    **pki.Transport
		id   auth.Identity
		addr string
	}{
		{&tr.api, auth.Identity{Component: auth.ComponentAPIServer, Name: "up"}, cfg.API.Addr},
		{&tr.node, auth.Identity{Component: auth.ComponentNode, Name: cfg.Node.Name}, cfg.Tunnel.Addr},
		{&tr.router, auth.Identity{Component: auth.ComponentRouter, Name: "up"}, ""},
	} {
		host, _, _ := net.SplitHostPort(c.addr)
		t, src, err := a.Transport(ctx, c.id, host)
		if err != nil {
			return upTransports{}, err
		}
		id := c.id
		src.OnRenew(func(leaf *x509.Certificate) {
			log.Info("certificate renewed", "identity", id.String(), "serial", leaf.SerialNumber.Text(16), "notAfter", leaf.NotAfter)
		})
		*c.t = t
	}
	return tr, nil
}

// lockIsPath reports whether the file lock holds is still the one at its
// path: the owner removes the file on exit while holding it, so a lock
// won on a removed file is no lock at all.
func lockIsPath(lock *flock.Flock) bool {
	held, err := lock.Stat()
	if err != nil {
		return false
	}
	onDisk, err := os.Stat(lock.Path())
	return err == nil && os.SameFile(held, onDisk)
}
