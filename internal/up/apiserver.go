package up

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/client-go/kubernetes"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/alarm"
	"substrate.dev/ate/internal/apiserver"
	"substrate.dev/ate/internal/ateconfig"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/dashboard"
	"substrate.dev/ate/internal/httpserve"
	"substrate.dev/ate/internal/k8s/controller"
	"substrate.dev/ate/internal/k8s/workeridentity"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/metrics"
	"substrate.dev/ate/internal/nodeagent"
	"substrate.dev/ate/internal/pki"
	"substrate.dev/ate/internal/runner"
	snapurl "substrate.dev/ate/internal/snapshot/storeurl"
	"substrate.dev/ate/internal/store"
	storeurl "substrate.dev/ate/internal/store/storeurl"
)

// APIServerConfig configures `ate apiserver`: the Control API and the
// node registry over one record store, with nodes running apart.
type APIServerConfig struct {
	// DataDir holds the snapshot cache and image metadata; default
	// $HOME/.ate-apiserver.
	DataDir string
	// Store is the record store (storeurl.Open): bolt:///path/ate.db
	// (default <DataDir>/ate.db), or postgres://… shared by several API
	// server replicas. With StoreFile it is read by storeurl.Resolve:
	// this (--store, warned about if it holds a password), else the
	// file's content, else $ATE_STORE.
	Store, StoreFile string
	// Leases configures the per-actor leases replicas over a shared store
	// fence workflows with (unused with bolt, which one process holds).
	Leases lifecycle.LeaseConfig
	// Snapshots is the durable snapshot store's URL (storeurl.Open):
	// s3://bucket/prefix?endpoint=… in a cluster; default
	// <DataDir>/snapshots, which only works with nodes on this machine.
	Snapshots string
	// Addr is the gRPC listen address (Control and NodeRegistry).
	Addr string
	// ManagementAddr serves /healthz, /readyz and /metrics; empty means
	// none.
	ManagementAddr string
	// PprofAddr serves net/http/pprof (httpserve.NewPprof: loopback
	// only); empty means none.
	PprofAddr string
	// HTTPAddr serves the web dashboard (internal/dashboard), calling
	// this server's own Control API over gRPC; empty means none.
	HTTPAddr string
	// Identity configures actor identity; its issuer URL defaults to
	// HTTPAddr's (then discovery is served there).
	Identity IdentityConfig
	// SandboxClass is the class the nodes' workers run (templates naming
	// another are refused); default DefaultSandboxClass.
	SandboxClass string
	// SnapshotGCInterval is how often, in the window after start-up in
	// which a predecessor's snapshots may still appear, unreferenced ones
	// are collected (lifecycle.OrphanCollection.Interval; default
	// lifecycle.DefaultOrphanInterval).
	SnapshotGCInterval time.Duration
	// ExpiryInterval is how often the expiry sweep deletes actors unused
	// past their template's ttl (lifecycle.RunExpiry; default
	// lifecycle.DefaultExpiryInterval). Every replica sweeps; deletions
	// are serialised by the actors' leases.
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

	// Auth is who may call (docs/security.md).
	Auth auth.Config
	// MaxStreamsPerCaller bounds the watches and log follows one caller
	// may hold open on this replica at once; 0 means
	// apiserver.DefaultMaxStreamsPerCaller.
	MaxStreamsPerCaller int
	// Heartbeat and LostAfter: nodeagent.RegistryConfig.
	Heartbeat, LostAfter time.Duration
	// TLS: --tls-dir (an apiserver certificate), --insecure,
	// --trust-domain (pki.Settings); one of the first two is required.
	TLS pki.Settings
	// NodeIdentity, when its SignerDir is set, makes this API server
	// give worker Pods their node certificates for their ServiceAccount
	// tokens (internal/k8s/workeridentity).
	NodeIdentity NodeIdentityConfig
	Logger       *slog.Logger
	// Ready, if set, is called with the API address once it serves.
	Ready func(addr string)
}

// NodeIdentityConfig: apiserver --node-signer-dir, --node-token-audience,
// --node-cert-ttl, --kubeconfig.
type NodeIdentityConfig struct {
	// SignerDir holds the CA (ca.crt, ca.key) node certificates are
	// signed with: one --tls-dir's ca.crt trusts. Empty: no NodeIdentity
	// service.
	SignerDir string
	// Audience is the tokens' audience (workeridentity.DefaultAudience if
	// empty); TTL a certificate's life (workeridentity.DefaultTTL if 0).
	Audience string
	TTL      time.Duration
	// Kubeconfig is the cluster the tokens and Pods are reviewed in;
	// empty: in-cluster, else the default loading rules.
	Kubeconfig string
}

// RunAPIServer serves until ctx ends, then stops accepting calls, lets
// those in flight (and the workflows they run) finish, and closes the
// store. Nodes keep their actors running across its restart: their
// registrations reconcile them.
func RunAPIServer(ctx context.Context, cfg APIServerConfig) error {
	s := &apiServerAssembly{cfg: cfg, log: orDiscard(cfg.Logger)}
	defer s.done.run()
	if err := assemble(ctx, s.configure, s.serveManagement, s.openStore, s.newAPI, s.listen, s.newDashboard); err != nil {
		return err
	}
	return s.run(ctx)
}

// apiServerAssembly is RunAPIServer's parts, built in its steps' order.
type apiServerAssembly struct {
	cfg APIServerConfig
	log *slog.Logger
	// done closes what the steps opened, when RunAPIServer returns.
	done cleanups

	tr *pki.Transport
	// ms records metrics; nil when nothing serves them.
	ms *metrics.Metrics
	// storeReady is set once the store is open (/readyz).
	storeReady atomic.Bool
	st         store.Store
	// shared is storeurl.Opened.Shared; storeName its Description.
	shared    bool
	storeName string
	// apiCore is the registry, the workflows, the Control API, the
	// alarms and the issuer (newAPICore), from newAPI on.
	*apiCore
	ceilings apiserver.Ceilings
	ln       net.Listener
	gs       *grpc.Server
	authz    *auth.Authorizer
	// nodeIdentity signs worker Pods' node certificates; nil unless
	// NodeIdentity.SignerDir is set.
	nodeIdentity *workeridentity.Server
	// dash is the dashboard's listener; nil when there is none.
	dash *dashboardServer
	// health answers gRPC's health check: whether the store is reached.
	health *apiserver.StoreHealth
}

// configure checks the settings, starts tracing, loads the TLS
// settings and settles the data dir and the record store's URL.
func (s *apiServerAssembly) configure(ctx context.Context) error {
	if s.cfg.MaxStreamsPerCaller < 0 {
		return fmt.Errorf("max streams per caller %d is negative", s.cfg.MaxStreamsPerCaller)
	}
	if err := checkRegistryCredentials(s.cfg.RegistryCredentials); err != nil {
		return err
	}
	flushTraces, err := startTracing(ctx, "ate-apiserver", s.log)
	if err != nil {
		return err
	}
	s.done.add(flushTraces)
	if s.tr, err = s.cfg.TLS.Load(ctx, auth.ComponentAPIServer, s.log); err != nil {
		return err
	}
	if err := s.newNodeIdentity(); err != nil {
		return err
	}
	if s.cfg.DataDir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return err
		}
		s.cfg.DataDir = filepath.Join(home, ".ate-apiserver")
	}
	if s.cfg.Store, err = resolveStore(s.cfg.Store, s.cfg.StoreFile, s.log); err != nil {
		return err
	}
	if err := os.MkdirAll(s.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	return nil
}

// serveManagement starts the management listener and pprof. The
// management server answers before the store is reached, so an
// orchestrator sees /readyz 503 (not a dead port) while the database is
// still coming up.
func (s *apiServerAssembly) serveManagement(ctx context.Context) error {
	if s.cfg.ManagementAddr != "" || s.cfg.HTTPAddr != "" {
		s.ms = metrics.New()
	}
	if s.cfg.ManagementAddr != "" {
		mgmt, err := newManagementServer(s.cfg.ManagementAddr, s.ms, func() error {
			if !s.storeReady.Load() {
				return errors.New("record store not reached yet")
			}
			return nil
		})
		if err != nil {
			return err
		}
		s.done.add(mgmt.Close)
		go func() { _ = mgmt.Serve(ctx) }()
	}
	stopPprof, err := httpserve.StartPprof(ctx, s.cfg.PprofAddr)
	if err != nil {
		return err
	}
	s.done.add(stopPprof)
	return nil
}

// newNodeIdentity builds the NodeIdentity service when --node-signer-dir
// is given: its CA must be one the components trust (--tls-dir's
// ca.crt), or every node it signed for would be refused.
func (s *apiServerAssembly) newNodeIdentity() error {
	c := s.cfg.NodeIdentity
	if c.SignerDir == "" {
		return nil
	}
	if s.tr == nil {
		return errors.New("--node-signer-dir: node certificates need TLS: pass --tls-dir, not --insecure")
	}
	ca, err := pki.LoadCA(c.SignerDir)
	if err != nil {
		return fmt.Errorf("--node-signer-dir: %w", err)
	}
	if _, err := ca.Cert.Verify(x509.VerifyOptions{Roots: s.tr.Source.Roots(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fmt.Errorf("--node-signer-dir: its CA is not one --tls-dir's %s trusts, so the nodes it signed for would be refused: %w", pki.CAFile, err)
	}
	c.Audience = orDefault(c.Audience, workeridentity.DefaultAudience)
	s.cfg.Auth.NodeAudience = c.Audience
	if err := s.cfg.Auth.CheckNodeAudience(); err != nil {
		return err
	}
	rc, err := controller.RESTConfig(c.Kubeconfig)
	if err != nil {
		return fmt.Errorf("--node-signer-dir: the cluster to review tokens in: %w", err)
	}
	rc.UserAgent = "ate-apiserver"
	// client-go's default 5 requests/s would let anonymous callers'
	// reviews, however few at once (workeridentity's slots), starve the
	// worker Pods' own; three calls per certificate, one per Pod an hour.
	rc.QPS, rc.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("--node-signer-dir: kubernetes client: %w", err)
	}
	s.nodeIdentity, err = workeridentity.New(workeridentity.Config{Client: cs, Audience: c.Audience, CA: ca,
		TrustDomain: s.tr.TrustDomain, TTL: c.TTL, Logger: s.log})
	return err
}

// openStore opens the record store, waiting for a database that is not
// up yet (storeurl.OpenRetrying), and makes the default atespace.
func (s *apiServerAssembly) openStore(ctx context.Context) error {
	opened, err := storeurl.OpenRetrying(ctx, s.cfg.Store, storeurl.Options{DefaultPath: filepath.Join(s.cfg.DataDir, DBName), Logger: s.log})
	if err != nil {
		return fmt.Errorf("record store: %w", err)
	}
	s.st, s.shared, s.storeName = opened.Store, opened.Shared, opened.Description
	observeCommits(s.st, s.ms)
	s.done.add(func() { _ = s.st.Close() })
	s.storeReady.Store(true)
	return apiserver.EnsureDefaultAtespace(ctx, s.st)
}

// newAPI opens the snapshot store and builds the API server's parts
// (newAPICore) over it, then recovers the workflows: nodes run apart and
// outlive us, so their actors are left to their registrations
// (lifecycle.Manager.RecoverStore).
func (s *apiServerAssembly) newAPI(ctx context.Context) error {
	s.cfg.Snapshots = orDefault(s.cfg.Snapshots, filepath.Join(s.cfg.DataDir, "snapshots"))
	snaps, err := snapurl.Open(ctx, s.cfg.Snapshots,
		snapurl.Options{CacheDir: filepath.Join(s.cfg.DataDir, "snapshot-cache"), Logger: s.log})
	if err != nil {
		return fmt.Errorf("snapshot store: %w", err)
	}
	if s.ceilings, err = s.cfg.Ceilings.apiCeilings(ctx, s.log, s.cfg.Store, s.cfg.Snapshots); err != nil {
		return err
	}
	images, err := newImageCache(s.cfg.DataDir, s.cfg.ImageRoots, s.cfg.RegistryCredentials, s.log)
	if err != nil {
		return err
	}
	ac := alarm.Config{TunnelTLS: s.tr.HTTPClientConfig(auth.ComponentNode)}
	if nt := s.tr.NewNodeTransport(alarm.NewTunnelTransport()); nt != nil {
		ac.Transport = nt
	}
	s.apiCore, err = newAPICore(ctx, apiCoreConfig{Store: s.st, Shared: s.shared, Snapshots: snaps,
		Registry: nodeagent.RegistryConfig{Heartbeat: s.cfg.Heartbeat, LostAfter: s.cfg.LostAfter, Dial: nodeDialer(s.ms, s.tr), Snapshots: s.cfg.Snapshots},
		Leases:   s.cfg.Leases, Ceilings: s.ceilings, SandboxClass: orDefault(s.cfg.SandboxClass, DefaultSandboxClass), Images: images,
		MaxStreamsPerCaller: s.cfg.MaxStreamsPerCaller, Alarm: ac, AlarmHolder: "ate-apiserver", Identity: s.cfg.Identity, Metrics: s.ms, Logger: s.log})
	if err != nil {
		return err
	}
	// Node connections close last: after the graceful stop let in-flight
	// calls finish, and after the lifecycle's own workflows (closed
	// later, so run first).
	s.done.add(s.registry.Close)
	s.done.add(s.lifecycle.Close)
	if err := s.lifecycle.RecoverStore(ctx); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	return nil
}

// listen opens the API's listener and its gRPC server: Control and
// NodeRegistry behind the authorisation interceptors.
func (s *apiServerAssembly) listen(context.Context) error {
	var err error
	if s.ln, err = net.Listen("tcp", orDefault(s.cfg.Addr, DefaultAPIAddr)); err != nil {
		return fmt.Errorf("api listen: %w", err)
	}
	// For a later step's failure; once served, the gRPC server's stop
	// has closed it already.
	s.done.add(func() { _ = s.ln.Close() })
	// Users come without certificates (bearer tokens); components with.
	// Without TLS (--insecure) the API may run with no authenticator, and
	// then checks nothing.
	ac := s.cfg.Auth
	ac.Insecure = s.tr == nil
	if s.tr != nil {
		ac.TrustDomain = s.tr.TrustDomain
	}
	if s.authz, err = authorize(s.api, ac, s.cfg.Identity.IssuerURL, s.st, s.log); err != nil {
		return err
	}
	gs, initMetrics := newAPIGRPCServer(s.ms, append(s.tr.ServerOptions(pki.ClientCertOptional), s.authz.ServerOptions()...)...)
	atev1.RegisterControlServer(gs, s.api)
	atev1.RegisterNodeRegistryServer(gs, s.registry)
	if s.nodeIdentity != nil {
		atev1.RegisterNodeIdentityServer(gs, s.nodeIdentity)
	}
	s.health = apiserver.NewStoreHealth(s.st, s.log)
	healthpb.RegisterHealthServer(gs, s.health)
	initMetrics()
	s.gs = gs
	return nil
}

// newDashboard listens for the dashboard on HTTPAddr, if set, and
// defaults the identity issuer's URL to its address (where discovery is
// then served).
func (s *apiServerAssembly) newDashboard(context.Context) error {
	if s.cfg.HTTPAddr == "" {
		return nil
	}
	// Through a gRPC client of this very server, so every check the API
	// makes applies to the dashboard's buttons too. As a client of the
	// config file does (ateconfig.DialOptions), trusting the CA of
	// --tls-dir.
	dc := ateconfig.Config{Server: s.ln.Addr().String()}
	if s.tr != nil {
		dc.CertificateAuthority = filepath.Join(s.cfg.TLS.Dir, pki.CAFile)
	}
	opts, err := ateconfig.DialOptions(dc)
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	conn, err := grpc.NewClient(dc.Server, opts...)
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	s.done.add(func() { _ = conn.Close() })
	// No router runs here: only the resume latency is recorded.
	var resume []dashboard.LatencySeries
	for _, series := range dashboard.DefaultLatencySeries() {
		if series.Metric == dashboard.MetricResume {
			resume = append(resume, series)
		}
	}
	if s.dash, err = newDashboardServer(s.cfg.HTTPAddr, atev1.NewControlClient(conn), s.ms, resume, s.authz != nil, s.issuer, s.log); err != nil {
		return err
	}
	if s.cfg.Identity.IssuerURL == "" {
		s.issuer.SetIssuerURL(issuerURLFor(s.dash.srv.Addr()))
	}
	return nil
}

// run serves every part until ctx ends (or one fails), then stops them
// in reverse order (runner.Runner).
func (s *apiServerAssembly) run(ctx context.Context) error {
	r := runner.New(s.log)
	r.Add("api", func(ctx context.Context) error {
		// Watches and log follows would hold the graceful stop to its end.
		defer context.AfterFunc(ctx, s.api.EndStreams)()
		return serveGRPC(ctx, s.gs, s.ln)
	})
	// The node sessions end before the graceful stop above begins: it
	// waits for every call, and they never end by themselves. The nodes
	// retry until an API server is back.
	r.Add("node registry", s.registry.Run)
	r.Add("store health", s.health.Run)
	dashURL := ""
	if s.dash != nil {
		r.Add("dashboard", s.dash.Start)
		dashURL = s.dash.URL()
	}
	r.Add("alarms", s.alarms.Run)
	r.Add("identity keys", s.issuer.Run)
	orphans := lifecycle.OrphanCollection{Shared: s.shared, CheckpointTimeout: nodeagent.CheckpointTimeout, Interval: s.cfg.SnapshotGCInterval}
	r.Add("snapshot collection", func(ctx context.Context) error { return s.lifecycle.CollectOrphans(ctx, orphans) })
	r.Add("expiry", func(ctx context.Context) error { return s.lifecycle.RunExpiry(ctx, s.cfg.ExpiryInterval) })
	r.Add("actor counts", func(ctx context.Context) error { return s.ms.RunActorCounts(ctx, s.st, s.log) })
	s.log.Info("ate apiserver ready", "api", s.ln.Addr().String(), "store", s.storeName, "replica", s.holder, "snapshots", s.cfg.Snapshots, "dashboard", dashURL)
	if s.cfg.Ready != nil {
		s.cfg.Ready(s.ln.Addr().String())
	}
	return r.Run(ctx)
}

// resolveStore returns the record store's URL (storeurl.Resolve), warning
// when a password came on the command line.
func resolveStore(flag, file string, log *slog.Logger) (string, error) {
	u, exposed, err := storeurl.Resolve(storeurl.Source{URL: flag, File: file}, os.Getenv)
	if err != nil {
		return "", fmt.Errorf("record store: %w", err)
	}
	if exposed {
		log.Warn("the record store's password is on the command line, where ps and /proc/<pid>/cmdline show it to others on this machine: give it with --store-file or $"+storeurl.EnvVar,
			"store", storeurl.Redact(u))
	}
	return u, nil
}

// replicaName names this process in the store's leases: the host name and
// a random suffix, so two replicas never share one, and a restarted
// replica does not inherit the leases of the process it replaces (their
// workflows died with it; the leases lapse).
func replicaName() string {
	host, err := os.Hostname()
	if err != nil {
		host = "apiserver"
	}
	return fmt.Sprintf("%s-%08x", host, rand.Uint32())
}
