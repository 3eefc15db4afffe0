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

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/apidial"
	"substrate.dev/ate/internal/auth"
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
	// TLS: --tls-dir (a node certificate naming Node.Name), --insecure,
	// --trust-domain.
	TLS    pki.Settings
	Logger *slog.Logger
}

// RunNode serves until ctx ends, then drains: the API server checkpoints
// every actor the node hosts and places nothing new on it; then the node
// leaves and its sandboxes and network namespaces are removed. Start-up
// fails with the API server's reason when it refuses the registration
// (a name live elsewhere, workers another node registered).
func RunNode(ctx context.Context, cfg NodeAgentConfig) error {
	log := orDiscard(cfg.Logger)
	flushTraces, err := startTracing(ctx, "ate-node", log)
	if err != nil {
		return err
	}
	defer flushTraces()
	if cfg, err = cfg.withDefaults(); err != nil {
		return err
	}
	tr, err := cfg.TLS.Load(ctx, auth.ComponentNode, log)
	if err != nil {
		return err
	}
	if id, ok := tr.Identity(); ok && id.Name != cfg.Node.Name {
		return fmt.Errorf("--tls-dir: the certificate is node %s's, this node is %s (the API server would refuse it): issue one with `ate certs issue --component node --name %s`", id.Name, cfg.Node.Name, cfg.Node.Name)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if cfg.Gvisor, err = resolveRunsc(ctx, cfg, log); err != nil {
		return err
	}
	snaps, err := storeurl.Open(ctx, cfg.Snapshots, storeurl.Options{
		CacheDir: filepath.Join(cfg.DataDir, "snapshot-cache"), CacheBytes: cfg.CacheBytes, Logger: log})
	if err != nil {
		return fmt.Errorf("snapshot store: %w", err)
	}
	paused, err := snapshot.NewLocal(filepath.Join(cfg.DataDir, "paused"))
	if err != nil {
		return err
	}
	rt, setup, teardown, closeRT, err := sandboxClass(cfg.Node, cfg.Gvisor, log)
	if err != nil {
		return err
	}
	defer closeRT()

	var tunnel http.Handler
	ts := httpserve.NewServer("worker-tunnel", net.JoinHostPort(cfg.Advertise, fmt.Sprint(cfg.TunnelPort)),
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tunnel.ServeHTTP(w, r) }), log)
	// Routers proxy to it, the API server's alarm scheduler delivers
	// through it; nobody else.
	ts.TLS = tr.HTTPServerConfig(auth.ComponentRouter, auth.ComponentAPIServer)
	if err := ts.Listen(); err != nil {
		return fmt.Errorf("tunnel: %w", err)
	}
	agentLn, err := net.Listen("tcp", net.JoinHostPort(cfg.Advertise, fmt.Sprint(cfg.AgentPort)))
	if err != nil {
		return fmt.Errorf("node agent listen: %w", err)
	}
	var ms *metrics.Metrics
	if cfg.ManagementAddr != "" {
		ms = metrics.New()
	}
	nc := cfg.Node
	nc.Runtime, nc.Setup, nc.Teardown, nc.TunnelAddr = rt, setup, teardown, ts.Addr()
	images, err := newImageCache(cfg.DataDir, cfg.ImageRoots, cfg.RegistryCredentials, log)
	if err != nil {
		return err
	}
	nc.Images, nc.Snapshots, nc.Paused, nc.StateDir = images, snaps, paused, filepath.Join(cfg.DataDir, "node")
	nc.Logger = log
	if ms != nil {
		nc.Metrics = ms.Node
	}
	// Sandboxes reach the API server only through their gateway's
	// endpoints, whatever their template allows.
	nc.EgressDeny = append(nc.EgressDeny, apiServerPrefixes(ctx, cfg.API, log)...)
	if nc.EgressCeiling, err = cfg.Ceilings.egress(ctx, log, cfg.Snapshots); err != nil {
		return err
	}
	n, err := node.New(ctx, nc)
	if err != nil {
		return err
	}
	defer n.Shutdown(context.Background())
	// Until the API server welcomes us, nothing it did not place here is
	// served.
	n.Fence(true)
	tunnel = n.NewTunnel()

	// One session per API server replica (nodeagent.Agent says why).
	replicas, err := apidial.NewReplicaLister(cfg.API)
	if err != nil {
		return fmt.Errorf("--api: %w", err)
	}
	defer replicas.Close()
	agent := nodeagent.NewAgent(nodeagent.AgentConfig{Node: n, Dial: componentDialer(ms, tr, auth.ComponentAPIServer),
		Replicas: replicas.List, Address: agentLn.Addr().String(),
		TunnelAddr: ts.Addr(), SandboxClass: nc.SandboxClass, Snapshots: cfg.Snapshots, Logger: log})
	// Only the API server calls the node agent: a router's or another
	// node's certificate is refused (PermissionDenied).
	gs, initMetrics := grpcServer(ms, append(tr.ServerOptions(pki.ClientCertRequired), tr.RequireComponents(auth.ComponentAPIServer)...)...)
	atev1.RegisterNodeAgentServer(gs, nodeagent.NewServer(n, agent))
	initMetrics()

	registered := make(chan error, 1)
	var welcomed atomic.Bool
	r := runner.New(log)
	r.ReadyWhen("registration", func() error {
		if !welcomed.Load() {
			return errors.New("not registered with the API server yet")
		}
		return nil
	})
	if cfg.ManagementAddr != "" {
		mgmt, err := newManagementServer(cfg.ManagementAddr, ms, r.Ready)
		if err != nil {
			return err
		}
		defer mgmt.Close()
		r.Add("management", mgmt.Serve)
	}
	stopPprof, err := httpserve.StartPprof(ctx, cfg.PprofAddr)
	if err != nil {
		return err
	}
	defer stopPprof()
	r.Add("node agent", func(ctx context.Context) error { return serveGRPC(ctx, gs, agentLn) })
	r.Add("worker tunnel", ts.Start)
	r.Add("self-service", func(ctx context.Context) error { return n.ServeSelfService(ctx, agent.SelfRequest) })
	r.Add("registration", func(ctx context.Context) error { return agent.Run(ctx, registered) })
	// On shutdown, while the agent's sessions, the NodeAgent service and
	// the tunnel still serve: the API server puts away what this node
	// has, then we leave. A node never welcomed hosts nothing and has
	// nobody to tell. A drain that left actors behind is a failed stop,
	// not a clean one.
	r.AddStop("drain", func(ctx context.Context) error {
		n.StopStandbys()
		if !welcomed.Load() {
			return nil
		}
		ctx, cancel := context.WithTimeout(ctx, cfg.DrainTimeout)
		defer cancel()
		if err := agent.Drain(ctx); err != nil {
			log.Error("drain failed: what is left on this node is lost with it", "err", err)
			return err
		}
		return nil
	})
	r.Add("welcome", func(ctx context.Context) error {
		select {
		case err := <-registered:
			if err != nil {
				return fmt.Errorf("register with the API server at %s: %w", cfg.API, err)
			}
		case <-ctx.Done():
			return nil
		}
		welcomed.Store(true)
		log.Info("ate node ready", "node", nc.Name, "api", cfg.API, "agent", agentLn.Addr().String(),
			"tunnel", ts.Addr(), "workers", nc.Workers, "snapshots", cfg.Snapshots)
		return nil
	})
	return r.Run(ctx)
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
	var out []netip.Prefix
	for _, rep := range reps {
		host, _, err := net.SplitHostPort(rep)
		if err != nil {
			host = rep
		}
		out = appendHostPrefixes(ctx, log, out, host, "egress: cannot resolve an API server replica to deny it to sandboxes")
	}
	return out
}
