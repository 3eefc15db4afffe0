package up

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/apidial"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/egress"
	"substrate.dev/ate/internal/httpserve"
	"substrate.dev/ate/internal/metrics"
	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/nodeagent"
	"substrate.dev/ate/internal/pki"
	"substrate.dev/ate/internal/runner"
	"substrate.dev/ate/internal/runtimeasset"
	"substrate.dev/ate/internal/sandbox"
	"substrate.dev/ate/internal/sandbox/gvisor"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/snapshot/storeurl"
)

// NodeAgentConfig configures `ate node`: one node agent with its workers,
// its worker tunnel and its NodeAgent service, registered with a remote
// API server.
type NodeAgentConfig struct {
	// DataDir holds images, the paused snapshot store, the snapshot cache
	// and worker state; default $HOME/.ate-node.
	DataDir string
	// API is the API server's gRPC address.
	API string
	// Advertise is the host other machines reach this node at; the
	// tunnel and agent listen on it (AgentPort, TunnelPort; 0 picks).
	Advertise             string
	AgentPort, TunnelPort int
	// Snapshots is the durable snapshot store's URL (storeurl.Open), the
	// same the API server uses; CacheBytes bounds its local cache.
	Snapshots  string
	CacheBytes int64
	// Node: Name (default the host name), Workers, WorkerPrefix (default
	// derived from Name and DataDir), Labels, SandboxClass, NoStandbys.
	Node   node.Config
	Gvisor gvisor.Config
	// RunscAssets (--runsc-asset) are runsc per architecture by URL and
	// sha256: with the gvisor class, the one for this machine is fetched
	// into <DataDir>/runtime and verified before any sandbox is touched,
	// and runs instead of Gvisor.RunscPath, which must then be empty.
	RunscAssets []runtimeasset.Asset
	// Ceilings are the operator's egress ceiling (Ceilings.EgressAllow, EgressDeny), enforced
	// on every connection's destination; nil bounds
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

	// ManagementAddr serves /healthz, /readyz (ready once registered)
	// and /metrics; empty means none.
	ManagementAddr string
	// PprofAddr serves net/http/pprof (httpserve.NewPprof: loopback
	// only); empty means none.
	PprofAddr string
	// DrainTimeout bounds the drain on shutdown (default 60 s).
	DrainTimeout time.Duration
	// TLS: --tls-dir (a node certificate naming Node.Name), --insecure
	// or --tls-bootstrap-dir (a certificate asked of the API server with
	// a ServiceAccount token), --trust-domain.
	TLS    pki.Settings
	Logger *slog.Logger
}

// RunNode serves until ctx ends, then drains: the API server checkpoints
// every actor the node hosts and places nothing new on it; then the node
// leaves and its sandboxes and network namespaces are removed. Start-up
// fails with the API server's reason when it refuses the registration
// (a name live elsewhere, workers another node registered).
func RunNode(ctx context.Context, cfg NodeAgentConfig) error {
	s := &nodeAssembly{cfg: cfg, log: orDiscard(cfg.Logger), registered: make(chan error, 1)}
	defer s.done.run()
	if err := assemble(ctx, s.configure, s.open, s.newNode); err != nil {
		return err
	}
	return s.run(ctx)
}

// nodeAssembly is RunNode's parts, built in its steps' order.
type nodeAssembly struct {
	cfg NodeAgentConfig
	log *slog.Logger
	// done closes what the steps opened, when RunNode returns.
	done cleanups

	tr *pki.Transport
	// tunnel listens from the start; serveTunnel gives it the node's
	// handler once the node exists.
	tunnel      *httpserve.Server
	serveTunnel func(http.Handler)
	agentLn     net.Listener
	// ms records metrics; nil without a management listener.
	ms    *metrics.Metrics
	parts nodeParts
	gs    *grpc.Server
	// registered receives the outcome of the first registration;
	// welcomed is set once it succeeded.
	registered chan error
	welcomed   atomic.Bool
}

// configure starts tracing, defaults and checks the settings (the TLS
// certificate must be this node's), makes the data dir and fetches
// runsc, before anything else is opened.
func (s *nodeAssembly) configure(ctx context.Context) error {
	flushTraces, err := startTracing(ctx, "ate-node", s.log)
	if err != nil {
		return err
	}
	s.done.add(flushTraces)
	if s.cfg, err = s.cfg.withDefaults(); err != nil {
		return err
	}
	cfg := s.cfg
	if cfg.TLS.BootstrapDir != "" {
		err = s.bootstrapTLS(ctx)
	} else {
		s.tr, err = cfg.TLS.Load(ctx, auth.ComponentNode, s.log)
	}
	if err != nil {
		return err
	}
	if id, ok := s.tr.Identity(); ok && id.Name != cfg.Node.Name {
		return fmt.Errorf("--tls-dir: the certificate is node %s's, this node is %s (the API server would refuse it): issue one with `ate certs issue --component node --name %s`", id.Name, cfg.Node.Name, cfg.Node.Name)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	s.cfg.Gvisor, err = resolveRunsc(ctx, cfg, s.log)
	return err
}

// bootstrapTLS obtains the node's certificate from the API server with
// the Pod's ServiceAccount token (--tls-bootstrap-dir) and keeps renewing
// it until ctx ends. The connection it asks over presents no certificate:
// it is the one thing a node without one may call.
func (s *nodeAssembly) bootstrapTLS(ctx context.Context) error {
	td := orDefault(s.cfg.TLS.TrustDomain, auth.DefaultTrustDomain)
	conn, err := apidial.Dial(s.cfg.API, grpc.WithTransportCredentials(credentials.NewTLS(pki.BootstrapClientConfig(s.cfg.TLS.BootstrapDir, td))))
	if err != nil {
		return fmt.Errorf("--api: %w", err)
	}
	s.done.add(func() { _ = conn.Close() })
	client := atev1.NewNodeIdentityClient(conn)
	issue := func(ctx context.Context, csr []byte, token string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, bootstrapCallTimeout)
		defer cancel()
		resp, err := client.IssueNodeCertificate(ctx, &atev1.IssueNodeCertificateRequest{CertificateRequest: csr, Token: token})
		return resp.GetCertificate(), err
	}
	tr, src, err := s.cfg.TLS.LoadBootstrap(ctx, s.cfg.Node.Name, issue, s.log)
	if err != nil {
		return fmt.Errorf("--tls-bootstrap-dir: node certificate from the API server at %s: %w", s.cfg.API, err)
	}
	go src.Run(ctx)
	s.tr = tr
	return nil
}

// bootstrapCallTimeout bounds one certificate request: a token review
// and two reads on the API server's side.
const bootstrapCallTimeout = 30 * time.Second

// open opens the snapshot stores and the workers' runtime, and listens
// for the worker tunnel and the node agent.
func (s *nodeAssembly) open(ctx context.Context) error {
	cfg := s.cfg
	snaps, err := storeurl.Open(ctx, cfg.Snapshots, storeurl.Options{
		CacheDir: filepath.Join(cfg.DataDir, "snapshot-cache"), CacheBytes: cfg.CacheBytes, Logger: s.log})
	if err != nil {
		return fmt.Errorf("snapshot store: %w", err)
	}
	paused, err := snapshot.NewLocal(filepath.Join(cfg.DataDir, "paused"))
	if err != nil {
		return err
	}
	rt, setup, teardown, closeRT, err := sandboxClass(cfg.Node, cfg.Gvisor, s.log)
	if err != nil {
		return err
	}
	s.done.add(closeRT)
	// Routers proxy to the tunnel, the API server's alarm scheduler
	// delivers through it; nobody else.
	if s.tunnel, s.serveTunnel, err = listenTunnel(net.JoinHostPort(cfg.Advertise, fmt.Sprint(cfg.TunnelPort)),
		s.tr.HTTPServerConfig(auth.ComponentRouter, auth.ComponentAPIServer), s.log); err != nil {
		return err
	}
	if s.agentLn, err = net.Listen("tcp", net.JoinHostPort(cfg.Advertise, fmt.Sprint(cfg.AgentPort))); err != nil {
		return fmt.Errorf("node agent listen: %w", err)
	}
	// For a later step's failure; once served, the gRPC server's stop
	// has closed it already.
	s.done.add(func() { _ = s.agentLn.Close() })
	if cfg.ManagementAddr != "" {
		s.ms = metrics.New()
	}
	s.cfg.Node.Runtime, s.cfg.Node.Setup, s.cfg.Node.Teardown, s.cfg.Node.TunnelAddr = rt, setup, teardown, s.tunnel.Addr()
	s.cfg.Node.Snapshots, s.cfg.Node.Paused = snaps, paused
	return nil
}

// newNode builds the node and its agent (newNodeParts), with one
// session per API server replica, has the tunnel serve the node, and
// makes the NodeAgent service's gRPC server.
func (s *nodeAssembly) newNode(ctx context.Context) error {
	cfg := s.cfg
	nc := cfg.Node
	images, err := newImageCache(cfg.DataDir, cfg.ImageRoots, cfg.RegistryCredentials, s.log)
	if err != nil {
		return err
	}
	nc.Images, nc.StateDir = images, filepath.Join(cfg.DataDir, "node")
	nc.Logger = s.log
	if s.ms != nil {
		nc.Metrics = s.ms.Node
	}
	// Sandboxes reach the API server only through their gateway's
	// endpoints, whatever their template allows.
	nc.EgressDeny = append(nc.EgressDeny, apiServerPrefixes(ctx, cfg.API, s.log)...)
	if nc.EgressCeiling, err = cfg.Ceilings.egress(ctx, s.log, cfg.Snapshots); err != nil {
		return err
	}
	replicas, err := apidial.NewReplicaLister(cfg.API)
	if err != nil {
		return fmt.Errorf("--api: %w", err)
	}
	s.done.add(replicas.Close)
	// One session per API server replica (nodeagent.Agent says why).
	if s.parts, err = newNodeParts(ctx, nc, nodeagent.AgentConfig{Dial: componentDialer(s.ms, s.tr, auth.ComponentAPIServer),
		Replicas: replicas.List, Address: s.agentLn.Addr().String(), Snapshots: cfg.Snapshots}); err != nil {
		return err
	}
	s.done.add(func() { s.parts.node.Shutdown(context.Background()) })
	s.serveTunnel(s.parts.node.NewTunnel())
	// Only the API server calls the node agent: a router's or another
	// node's certificate is refused (PermissionDenied).
	gs, initMetrics := grpcServer(s.ms, append(s.tr.ServerOptions(pki.ClientCertRequired), s.tr.RequireComponents(auth.ComponentAPIServer)...)...)
	atev1.RegisterNodeAgentServer(gs, s.parts.service)
	initMetrics()
	s.gs = gs
	return nil
}

// run serves every part until ctx ends (or one fails), then stops them
// in reverse order (runner.Runner), draining the node on the way.
func (s *nodeAssembly) run(ctx context.Context) error {
	r := runner.New(s.log)
	r.ReadyWhen("registration", func() error {
		if !s.welcomed.Load() {
			return errors.New("not registered with the API server yet")
		}
		return nil
	})
	if s.cfg.ManagementAddr != "" {
		mgmt, err := newManagementServer(s.cfg.ManagementAddr, s.ms, r.Ready)
		if err != nil {
			return err
		}
		s.done.add(mgmt.Close)
		r.Add("management", mgmt.Serve)
	}
	stopPprof, err := httpserve.StartPprof(ctx, s.cfg.PprofAddr)
	if err != nil {
		return err
	}
	s.done.add(stopPprof)
	r.Add("node agent", func(ctx context.Context) error { return serveGRPC(ctx, s.gs, s.agentLn) })
	r.Add("worker tunnel", s.tunnel.Start)
	s.parts.add(r, s.registered)
	r.AddStop("drain", s.drain)
	r.Add("welcome", s.welcome)
	return r.Run(ctx)
}

// drain runs on shutdown, while the agent's sessions, the NodeAgent
// service and the tunnel still serve: the API server puts away what this
// node has, then we leave. A node never welcomed hosts nothing and has
// nobody to tell. A drain that left actors behind is a failed stop, not
// a clean one.
func (s *nodeAssembly) drain(ctx context.Context) error {
	s.parts.node.StopStandbys()
	if !s.welcomed.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DrainTimeout)
	defer cancel()
	if err := s.parts.agent.Drain(ctx); err != nil {
		s.log.Error("drain failed: what is left on this node is lost with it", "err", err)
		return err
	}
	return nil
}

// welcome waits for the first registration's outcome: a refusal ends
// RunNode with the API server's reason; a welcome makes the node ready.
func (s *nodeAssembly) welcome(ctx context.Context) error {
	select {
	case err := <-s.registered:
		if err != nil {
			return fmt.Errorf("register with the API server at %s: %w", s.cfg.API, err)
		}
	case <-ctx.Done():
		return nil
	}
	s.welcomed.Store(true)
	s.log.Info("ate node ready", "node", s.cfg.Node.Name, "api", s.cfg.API, "agent", s.agentLn.Addr().String(),
		"tunnel", s.tunnel.Addr(), "workers", s.cfg.Node.Workers, "snapshots", s.cfg.Snapshots)
	return nil
}

func (c NodeAgentConfig) withDefaults() (NodeAgentConfig, error) {
	if c.API == "" {
		return c, errors.New("--api: the API server's address is required")
	}
	if err := checkNodeSettings(c.RegistryCredentials, c.Node); err != nil {
		return c, err
	}
	if c.DataDir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return c, err
		}
		c.DataDir = filepath.Join(home, ".ate-node")
	}
	dataDir, err := filepath.Abs(c.DataDir)
	if err != nil {
		return c, err
	}
	c.DataDir = dataDir
	if c.Node.Name == "" {
		if c.Node.Name, err = os.Hostname(); err != nil {
			return c, err
		}
	}
	if c.Gvisor.RunscPath != "" && len(c.RunscAssets) > 0 {
		return c, errors.New("--runsc and --runsc-asset are both given: give --runsc for a runsc installed on this machine, or --runsc-asset for one fetched and verified by its sha256, not both")
	}
	c.Advertise = orDefault(c.Advertise, "127.0.0.1")
	c.Snapshots = orDefault(c.Snapshots, filepath.Join(c.DataDir, "snapshots"))
	// Worker names are global across the cluster and name network
	// namespaces on the machine: both node name and data dir go in.
	if c.Node, err = nodeDefaults(c.Node, c.Node.Name+"\x00"+c.DataDir); err != nil {
		return c, err
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 60 * time.Second
	}
	return c, nil
}

// resolveRunsc returns cfg.Gvisor with RunscPath set to the verified runsc
// of cfg.RunscAssets for this machine, or unchanged when there are none.
// Another sandbox class runs no runsc: the assets are not fetched.
func resolveRunsc(ctx context.Context, cfg NodeAgentConfig, log *slog.Logger) (gvisor.Config, error) {
	gc := cfg.Gvisor
	if len(cfg.RunscAssets) == 0 {
		return gc, nil
	}
	if cfg.Node.SandboxClass != sandbox.ClassGvisor.String() {
		log.Info("--runsc-asset not fetched: the sandbox class runs no runsc", "sandbox_class", cfg.Node.SandboxClass)
		return gc, nil
	}
	path, err := runtimeasset.Resolve(ctx, runtimeasset.Options{CacheDir: filepath.Join(cfg.DataDir, "runtime"), Logger: log}, "runsc", cfg.RunscAssets)
	if err != nil {
		return gc, fmt.Errorf("--runsc-asset: %w", err)
	}
	gc.RunscPath = path
	return gc, nil
}

// apiServerPrefixes returns the addresses of the API server replicas
// target (--api, any apidial form) names now, as /32 and /128 prefixes,
// host names resolved. Failures give what was found (logged): the node's
// own addresses and link-local ones stay denied regardless, and replicas
// that move to new addresses later are not followed (the API server's
// own authentication still stands between them and a sandbox).
func apiServerPrefixes(ctx context.Context, target string, log *slog.Logger) []netip.Prefix {
	reps, err := apidial.Replicas(ctx, target)
	if err != nil {
		log.Warn("egress: cannot list the API server's addresses to deny them to sandboxes", "api", target, "err", err)
		return nil
	}
	return egress.HostPrefixes(ctx, log, "an API server replica", reps...)
}
