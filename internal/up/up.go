// Package up wires the all-in-one installation (`ate up`): API server over
// an embedded bbolt store, a node agent with local workers and its worker
// tunnel, and the router, in one process.
package up

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

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

// InProcessLostAfter is `ate up`'s --node-lost-after default, longer
// than a cluster's (nodeagent.DefaultLostAfter). Its node is in the
// process, over a store no other process uses, so no other node can
// serve its actors and fencing it soon protects nothing; what its lease
// meets instead are the process's own stalls. Under a burst of 70
// restores on two cores the record store went up to 7 s without
// committing a renewal, and at 5 s the node's lease lapsed: its tunnel
// refused requests and the API server declared its own node lost,
// crashing every actor (BENCHMARKS.md, Issue 35's other targets).
const InProcessLostAfter = 30 * time.Second

// Run starts everything and blocks until ctx ends, then stops it all.
func Run(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	u := &upAssembly{cfg: cfg, log: cfg.Logger}
	defer u.done.run()
	if err := assemble(ctx, u.configure, u.serveManagement, u.newControlPlane, u.listenAPI, u.newRouter, u.newDashboard, u.writeClientConfig); err != nil {
		return err
	}
	return u.run(ctx)
}

// upAssembly is Run's parts, built in its steps' order.
type upAssembly struct {
	cfg Config
	log *slog.Logger
	// done closes what the steps opened, when Run returns.
	done cleanups

	// node is cfg.Node with the workers' runtime and the tunnel's
	// address.
	node node.Config
	tr   upTransports
	// tunnel listens from the start; serveTunnel gives it the node's
	// handler once the node exists.
	tunnel      *httpserve.Server
	serveTunnel func(http.Handler)
	// ms records metrics; nil when nothing serves them. mgmt is the
	// management listener; nil when there is none.
	ms    *metrics.Metrics
	mgmt  *httpserve.Management
	cp    *ControlPlane
	apiLn net.Listener
	gs    *grpc.Server
	// adminToken is the operator's (<DataDir>/admin-token).
	adminToken string
	router     routerParts
	// client is how the dashboard and the demo reach the API: as a
	// client of the config file does.
	client ateconfig.Config
	// dash is the dashboard's listener; nil when there is none.
	dash *dashboardServer
	info Info
}

// configure settles the record store's URL and the data dir, starts
// tracing, builds the workers' runtime and the components' TLS, and
// listens for the worker tunnel.
func (u *upAssembly) configure(ctx context.Context) error {
	var err error
	if u.cfg.Store, err = resolveStore(u.cfg.Store, u.cfg.StoreFile, u.log); err != nil {
		return err
	}
	if err := os.MkdirAll(u.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	flushTraces, err := startTracing(ctx, "ate-up", u.log)
	if err != nil {
		return err
	}
	u.done.add(flushTraces)
	rt, setup, teardown, closeRT, err := sandboxClass(u.cfg.Node, u.cfg.Gvisor, u.log)
	if err != nil {
		return err
	}
	u.done.add(closeRT)
	if u.tr, err = newUpTransports(ctx, u.cfg, u.log); err != nil {
		return err
	}
	// The router proxies to the tunnel and the alarm scheduler delivers
	// through it.
	if u.tunnel, u.serveTunnel, err = listenTunnel(u.cfg.Tunnel.Addr, u.tr.node.HTTPServerConfig(auth.ComponentRouter, auth.ComponentAPIServer), u.log); err != nil {
		return err
	}
	u.node = u.cfg.Node
	u.node.Runtime, u.node.Setup, u.node.Teardown, u.node.TunnelAddr = rt, setup, teardown, u.tunnel.Addr()
	return nil
}

// serveManagement makes the metrics, the management listener and pprof.
// Metrics are recorded only when something serves them: the management
// listener, or the dashboard's latency chart.
func (u *upAssembly) serveManagement(ctx context.Context) error {
	if u.cfg.Metrics.Addr != "" || u.cfg.HTTP.Addr != "" {
		u.ms = metrics.New()
	}
	if u.cfg.Metrics.Addr != "" {
		var err error
		if u.mgmt, err = newManagementServer(u.cfg.Metrics.Addr, u.ms, nil); err != nil {
			return err
		}
		u.done.add(u.mgmt.Close)
	}
	stopPprof, err := httpserve.StartPprof(ctx, u.cfg.Metrics.PprofAddr)
	if err != nil {
		return err
	}
	u.done.add(stopPprof)
	return nil
}

// newControlPlane builds the control plane, the only one over its
// store, and has the tunnel serve its node.
func (u *upAssembly) newControlPlane(ctx context.Context) error {
	cfg := u.cfg
	cp, err := NewControlPlane(ctx, ControlPlaneConfig{DataDir: cfg.DataDir, Store: cfg.Store, Exclusive: true, Node: u.node, Logger: u.log, Metrics: u.ms, ImageRoots: cfg.ImageRoots, RegistryCredentials: cfg.RegistryCredentials, Ceilings: cfg.Ceilings,
		ExpiryInterval: cfg.API.ExpiryInterval, Identity: cfg.Identity, AlarmTunnelTLS: u.tr.api.HTTPClientConfig(auth.ComponentNode),
		Heartbeat: cfg.API.Heartbeat, LostAfter: cmp.Or(cfg.API.LostAfter, InProcessLostAfter), MaxStreamsPerCaller: cfg.API.MaxStreamsPerCaller})
	if err != nil {
		return err
	}
	u.cp = cp
	u.done.add(func() { _ = cp.Close() })
	u.serveTunnel(cp.Node.NewTunnel())
	return nil
}

// listenAPI opens the API's listener and its gRPC server behind the
// authorisation interceptors.
func (u *upAssembly) listenAPI(context.Context) error {
	var err error
	if u.apiLn, err = net.Listen("tcp", u.cfg.API.Addr); err != nil {
		return fmt.Errorf("api listen: %w", err)
	}
	// For a later step's failure; once served, the gRPC server's stop
	// has closed it already.
	u.done.add(func() { _ = u.apiLn.Close() })
	// The API always checks callers: components by their certificates
	// (the in-process router's is tr.router's), users by the admin token
	// (written into the client config, writeClientConfig) and whatever
	// cfg.API.Auth adds.
	if u.adminToken, err = auth.EnsureAdminToken(u.cfg.DataDir); err != nil {
		return err
	}
	ac := u.cfg.API.Auth
	ac.TrustDomain = u.tr.api.TrustDomain
	ac.Extra = []auth.StaticToken{auth.AdminToken(u.adminToken)}
	authz, err := authorize(u.cp.API, ac, u.cfg.Identity.IssuerURL, u.cp.Store, u.log)
	if err != nil {
		return err
	}
	u.gs = u.cp.NewGRPCServer(append(u.tr.api.ServerOptions(pki.ClientCertOptional), authz.ServerOptions()...)...)
	return nil
}

// newRouter builds the router over a connection to the API as the
// router component.
func (u *upAssembly) newRouter(context.Context) error {
	conn, err := grpc.NewClient(u.apiLn.Addr().String(), append(inProcessDialOptions(u.ms), u.tr.router.DialOption(auth.ComponentAPIServer))...)
	if err != nil {
		return err
	}
	u.done.add(func() { _ = conn.Close() })
	u.router, err = newRouter(u.cfg.Router, atev1.NewControlClient(conn), u.tr.router, u.ms, u.log)
	return err
}

// dialAs connects to the API as a client of the config file does
// (ateconfig.DialOptions), not as the router, with token: the dashboard
// with each page's user's token (dashboard.RequireLogin), the demo with
// the admin token, so every check the API makes applies to them.
func (u *upAssembly) dialAs(token string) (*grpc.ClientConn, error) {
	c := u.client
	c.Token = token
	opts, err := ateconfig.DialOptions(c)
	if err != nil {
		return nil, err
	}
	return grpc.NewClient(c.Server, append(inProcessDialOptions(u.ms), opts...)...)
}

// newDashboard listens for the dashboard on cfg.HTTP.Addr, if set, and
// defaults the identity issuer's URL to its address (where discovery is
// then served).
func (u *upAssembly) newDashboard(context.Context) error {
	u.client = ateconfig.Config{Server: u.apiLn.Addr().String(), CertificateAuthority: u.tr.authority.CAFile()}
	if u.cfg.HTTP.Addr == "" {
		return nil
	}
	dconn, err := u.dialAs("")
	if err != nil {
		return err
	}
	u.done.add(func() { _ = dconn.Close() })
	if u.dash, err = newDashboardServer(u.cfg.HTTP.Addr, atev1.NewControlClient(dconn), u.ms, nil, true, u.cp.Identity, u.log); err != nil {
		return err
	}
	if u.cfg.Identity.IssuerURL == "" {
		u.cp.Identity.SetIssuerURL(issuerURLFor(u.dash.srv.Addr()))
	}
	return nil
}

// writeClientConfig writes the client config (the API's address, the
// CA, the admin token) into the data dir, and gathers where everything
// listens.
func (u *upAssembly) writeClientConfig(context.Context) error {
	u.info = Info{APIAddr: u.apiLn.Addr().String(), RouterAddr: u.router.server.Addr(), ConfigPath: filepath.Join(u.cfg.DataDir, ClientConfigName)}
	if u.mgmt != nil {
		u.info.MetricsAddr = u.mgmt.Addr()
	}
	if u.dash != nil {
		u.info.DashboardURL = u.dash.URL()
	}
	c := u.client
	c.Token = u.adminToken
	return ateconfig.Write(u.info.ConfigPath, c)
}

// ready runs once every part serves: it says so, runs the demo if asked
// and calls cfg.Ready.
func (u *upAssembly) ready(ctx context.Context) error {
	info := u.info
	u.log.Info("ate up ready", "api", info.APIAddr, "router", info.RouterAddr, "workers", u.cfg.Node.Workers,
		"metrics", info.MetricsAddr, "dataDir", u.cfg.DataDir, "workerPrefix", u.cfg.Node.WorkerPrefix, "config", info.ConfigPath, "dashboard", info.DashboardURL)
	if info.DashboardURL != "" {
		fmt.Fprintf(os.Stdout, "Dashboard: %s\n", info.DashboardURL)
	}
	if u.cfg.Demo.Enabled {
		// The demo acts as the operator would, with the admin token.
		aconn, err := u.dialAs(u.adminToken)
		if err != nil {
			return err
		}
		defer aconn.Close()
		if err := demo(ctx, atev1.NewControlClient(aconn), u.cfg.Demo, info, u.log); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	if u.cfg.Ready != nil {
		u.cfg.Ready(info)
	}
	return nil
}

// run serves every part until ctx ends (or one fails), then stops them
// in reverse order (runner.Runner): the router drains first, and the
// control plane's background work (golden builds, snapshot collection,
// alarms) stops, while the API server, the node and its tunnel keep
// working — parked requests still need resumes, other clients may
// suspend actors meanwhile, and the router's idle loop keeps freeing
// workers; then every running actor is suspended; then the dashboard,
// the API server, the tunnel and the management listener stop. ready
// runs once all serve; an error from it (the demo's) stops everything.
func (u *upAssembly) run(ctx context.Context) error {
	r := runner.New(u.log)
	if u.mgmt != nil {
		// Up until the very end, so the shutdown itself can be watched.
		r.Add("management", u.mgmt.Serve)
	}
	r.Add("worker tunnel", u.tunnel.Start)
	r.Add("api", func(ctx context.Context) error {
		// Watches and log follows would hold the graceful stop to its end.
		defer context.AfterFunc(ctx, u.cp.API.EndStreams)()
		return serveGRPC(ctx, u.gs, u.apiLn)
	})
	if u.dash != nil {
		// Up with the API it calls, so shutdown's suspends show on it.
		r.Add("dashboard", u.dash.Start)
	}
	r.AddStop("suspend every actor", func(ctx context.Context) error {
		// Traffic has stopped; checkpoint what runs so a restart loses
		// nothing. Workers freed now need no standby.
		u.cp.Node.StopStandbys()
		ctx, cancel := context.WithTimeout(ctx, shutdownSuspendTimeout)
		defer cancel()
		if err := u.cp.Lifecycle.SuspendAll(ctx); err != nil {
			u.log.Warn("suspend on shutdown", "err", err)
		}
		return nil
	})
	// Background golden builds and the snapshot collection end with the
	// front, as new work is no longer wanted.
	r.Add("control plane", u.cp.Start)
	u.router.add(r)
	r.Add("ready", u.ready)
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
		// what a dead predecessor left (gvisor.LockRoot).
		unlock, err := gvisor.LockRoot(gc.RootDir)
		if errors.Is(err, gvisor.ErrRootInUse) {
			return nil, nil, nil, nil, fmt.Errorf("worker prefix %s is in use by another ate process on this machine (the same --data-dir and --name, or the same --worker-prefix)", nc.WorkerPrefix)
		}
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("lock worker prefix %s: %w", nc.WorkerPrefix, err)
		}
		rt, err := gvisor.New(gc)
		if err != nil {
			unlock()
			return nil, nil, nil, nil, err
		}
		return rt, netns.Ensure, netns.Remove, func() { _ = rt.Close(); unlock() }, nil
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
