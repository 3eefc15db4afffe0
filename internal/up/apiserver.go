package up

import (
	"context"
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

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/alarm"
	"substrate.dev/ate/internal/apiserver"
	"substrate.dev/ate/internal/ateconfig"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/dashboard"
	"substrate.dev/ate/internal/httpserve"
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
	// SnapshotGCInterval is how often, in the first orphanWindow after
	// start-up, unreferenced snapshots of a predecessor are collected
	// (default DefaultSnapshotGCInterval).
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
	Auth AuthConfig
	// MaxStreamsPerCaller bounds the watches and log follows one caller
	// may hold open on this replica at once; 0 means
	// apiserver.DefaultMaxStreamsPerCaller.
	MaxStreamsPerCaller int
	// Heartbeat and LostAfter: nodeagent.RegistryConfig.
	Heartbeat, LostAfter time.Duration
	// TLS: --tls-dir (an apiserver certificate), --insecure,
	// --trust-domain (pki.Settings); one of the first two is required.
	TLS    pki.Settings
	Logger *slog.Logger
	// Ready, if set, is called with the API address once it serves.
	Ready func(addr string)
}

// RunAPIServer serves until ctx ends, then stops accepting calls, lets
// those in flight (and the workflows they run) finish, and closes the
// store. Nodes keep their actors running across its restart: their
// registrations reconcile them.
func RunAPIServer(ctx context.Context, cfg APIServerConfig) error {
	log := orDiscard(cfg.Logger)
	if cfg.MaxStreamsPerCaller < 0 {
		return fmt.Errorf("max streams per caller %d is negative", cfg.MaxStreamsPerCaller)
	}
	if err := checkRegistryCredentials(cfg.RegistryCredentials); err != nil {
		return err
	}
	flushTraces, err := startTracing(ctx, "ate-apiserver", log)
	if err != nil {
		return err
	}
	defer flushTraces()
	tr, err := cfg.TLS.Load(ctx, auth.ComponentAPIServer, log)
	if err != nil {
		return err
	}
	if cfg.DataDir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return err
		}
		cfg.DataDir = filepath.Join(home, ".ate-apiserver")
	}
	if cfg.Store, err = resolveStore(cfg.Store, cfg.StoreFile, log); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	// The management server answers before the store is reached, so an
	// orchestrator sees /readyz 503 (not a dead port) while the database
	// is still coming up.
	var (
		ms         *metrics.Metrics
		mgmt       *httpserve.Management
		storeReady atomic.Bool
	)
	if cfg.ManagementAddr != "" || cfg.HTTPAddr != "" {
		ms = metrics.New()
	}
	if cfg.ManagementAddr != "" {
		if mgmt, err = newManagementServer(cfg.ManagementAddr, ms, func() error {
			if !storeReady.Load() {
				return errors.New("record store not reached yet")
			}
			return nil
		}); err != nil {
			return err
		}
		defer mgmt.Close()
		go func() { _ = mgmt.Serve(ctx) }()
	}
	stopPprof, err := httpserve.StartPprof(ctx, cfg.PprofAddr)
	if err != nil {
		return err
	}
	defer stopPprof()
	opened, err := openStore(ctx, cfg.Store, storeurl.Options{DefaultPath: filepath.Join(cfg.DataDir, DBName), Logger: log}, log)
	if err != nil {
		return err
	}
	st := opened.Store
	observeCommits(st, ms)
	defer st.Close()
	storeReady.Store(true)
	if err := apiserver.EnsureDefaultAtespace(ctx, st); err != nil {
		return err
	}
	cfg.Snapshots = orDefault(cfg.Snapshots, filepath.Join(cfg.DataDir, "snapshots"))
	snaps, err := snapurl.Open(ctx, cfg.Snapshots,
		snapurl.Options{CacheDir: filepath.Join(cfg.DataDir, "snapshot-cache"), Logger: log})
	if err != nil {
		return fmt.Errorf("snapshot store: %w", err)
	}
	reg, err := nodeagent.NewRegistry(ctx, nodeagent.RegistryConfig{Store: st, Heartbeat: cfg.Heartbeat, LostAfter: cfg.LostAfter, Dial: nodeDialer(ms, tr), Snapshots: cfg.Snapshots, Shared: opened.Shared,
		SandboxClass: orDefault(cfg.SandboxClass, DefaultSandboxClass), Logger: log})
	if err != nil {
		return err
	}
	// Node connections close last: after the graceful stop let in-flight
	// calls finish, and after the lifecycle's own workflows (deferred
	// later, so run first).
	defer reg.Close()
	// bbolt's file lock makes this the only API server over its store, so
	// workflows need no store leases (lifecycle.New); over a shared store
	// each replica holds leases under a name of its own.
	holder := ""
	if opened.Shared {
		holder = replicaName()
	}
	ceilings, err := cfg.Ceilings.apiCeilings(ctx, log, cfg.Store, cfg.Snapshots)
	if err != nil {
		return err
	}
	lc := lifecycle.New(st, reg, snaps, holder, log)
	lc.SetLeases(cfg.Leases)
	lc.SetEvictionLimits(ceilings.Eviction)
	if ms != nil {
		lc.SetMetrics(ms.Lifecycle)
	}
	defer lc.Close()
	reg.SetWorkflows(lc)
	// Only snapshots staged before this moment can be orphans of a
	// predecessor's workflows (snapshot.StagedBefore, to the millisecond;
	// node clocks are assumed to agree with ours to well under that
	// margin's use: a later id is never collected).
	recovered := time.Now()
	if err := lc.RecoverStore(ctx); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	images, err := newImageCache(cfg.DataDir, cfg.ImageRoots, cfg.RegistryCredentials, log)
	if err != nil {
		return err
	}
	api := apiserver.New(st, lc, orDefault(cfg.SandboxClass, DefaultSandboxClass), images, log)
	api.SetNodes(reg)
	api.SetMaxStreamsPerCaller(cfg.MaxStreamsPerCaller)
	api.SetCeilings(ceilings)
	ac := alarm.Config{Holder: orDefault(holder, "ate-apiserver"), TunnelTLS: tr.HTTPClientConfig(auth.ComponentNode)}
	if nt := tr.NewNodeTransport(alarm.NewTunnelTransport()); nt != nil {
		ac.Transport = nt
	}
	if ms != nil {
		ac.Metrics = ms.Alarms
	}
	alarms := alarm.New(st, lc, ac, log)
	api.SetAlarms(alarms)
	reg.SetSelfAlarmHandler(alarms.ServeSelf)
	issuer := cfg.Identity.newIssuer(st, log)
	reg.SetSelfCallHandler(selfCalls(issuer, lc))

	ln, err := net.Listen("tcp", orDefault(cfg.Addr, DefaultAPIAddr))
	if err != nil {
		return fmt.Errorf("api listen: %w", err)
	}
	// Users come without certificates (bearer tokens); components with.
	// Without TLS (--insecure) the API may run with no authenticator, and
	// then checks nothing.
	authc := cfg.Auth
	authc.Insecure = tr == nil
	if tr != nil {
		authc.TrustDomain = tr.TrustDomain
	}
	if err := checkIssuers(authc, cfg.Identity); err != nil {
		return err
	}
	authz, err := newAuthorizer(authc, st, log)
	if err != nil {
		return err
	}
	if err := wireAuth(api, authz, authc); err != nil {
		return err
	}
	gs, initMetrics := newAPIGRPCServer(ms, append(tr.ServerOptions(pki.ClientCertOptional), authServerOptions(authz)...)...)
	atev1.RegisterControlServer(gs, api)
	atev1.RegisterNodeRegistryServer(gs, reg)
	initMetrics()

	var dash *dashboardServer
	dashURL := ""
	if cfg.HTTPAddr != "" {
		// Through a gRPC client of this very server, so every check the
		// API makes applies to the dashboard's buttons too.
		// As a client of the config file does (ateconfig.DialOptions),
		// trusting the CA of --tls-dir.
		dc := ateconfig.Config{Server: ln.Addr().String()}
		if tr != nil {
			dc.CertificateAuthority = filepath.Join(cfg.TLS.Dir, pki.CAFile)
		}
		opts, err := ateconfig.DialOptions(dc)
		if err != nil {
			return fmt.Errorf("dashboard: %w", err)
		}
		conn, err := grpc.NewClient(dc.Server, opts...)
		if err != nil {
			return fmt.Errorf("dashboard: %w", err)
		}
		defer conn.Close()
		// No router runs here: only the resume latency is recorded.
		var resume []dashboard.LatencySeries
		for _, s := range dashboard.DefaultLatencySeries() {
			if s.Metric == dashboard.MetricResume {
				resume = append(resume, s)
			}
		}
		if dash, err = newDashboardServer(cfg.HTTPAddr, atev1.NewControlClient(conn), ms, resume, authz != nil, issuer, log); err != nil {
			_ = ln.Close()
			return err
		}
		if cfg.Identity.IssuerURL == "" {
			issuer.SetIssuerURL(issuerURLFor(dash.srv.Addr()))
		}
		dashURL = dash.URL()
	}
	// Over a shared store other replicas' workflows are under way: a
	// snapshot one of them staged before our start may not be recorded
	// yet. None can still be unrecorded orphanWindow after it was staged
	// (node operations are bounded by nodeagent.CheckpointTimeout), so
	// only older ones are collected, in one pass.
	cutoff := recovered
	if opened.Shared {
		cutoff = recovered.Add(-orphanWindow)
	}
	r := runner.New(log)
	r.Add("api", func(ctx context.Context) error {
		// Watches and log follows would hold the graceful stop to its end.
		defer context.AfterFunc(ctx, api.EndStreams)()
		return serveGRPC(ctx, gs, ln)
	})
	// The node sessions end before the graceful stop above begins: it
	// waits for every call, and they never end by themselves. The nodes
	// retry until an API server is back.
	r.Add("node registry", reg.Run)
	if dash != nil {
		r.Add("dashboard", dash.Start)
	}
	r.Add("alarms", alarms.Run)
	r.Add("identity keys", issuer.Run)
	r.Add("snapshot collection", func(ctx context.Context) error { return collectOrphans(ctx, lc, cutoff, cfg.SnapshotGCInterval, log) })
	r.Add("expiry", func(ctx context.Context) error { return lc.RunExpiry(ctx, cfg.ExpiryInterval) })
	r.Add("actor counts", func(ctx context.Context) error { runActorCounts(ctx, st, ms, log); return nil })
	log.Info("ate apiserver ready", "api", ln.Addr().String(), "store", opened.Description, "replica", holder, "snapshots", cfg.Snapshots, "dashboard", dashURL)
	if cfg.Ready != nil {
		cfg.Ready(ln.Addr().String())
	}
	return r.Run(ctx)
}

// openStore opens the record store, retrying with backoff (up to 5 s
// apart) while it is unreachable — a database that starts after us, or
// restarts — and logging each failure; other errors end start-up.
func openStore(ctx context.Context, u string, opts storeurl.Options, log *slog.Logger) (*storeurl.Opened, error) {
	backoff := 200 * time.Millisecond
	for {
		opened, err := storeurl.Open(ctx, u, opts)
		if err == nil {
			return opened, nil
		}
		if !errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil {
			return nil, fmt.Errorf("record store: %w", err)
		}
		log.Warn("record store unreachable; retrying", "store", storeurl.Redact(u), "retryIn", backoff, "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("record store: %w", err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
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

// DefaultSnapshotGCInterval is APIServerConfig.SnapshotGCInterval's
// default.
const DefaultSnapshotGCInterval = 30 * time.Second

// orphanWindow is how long after start-up a snapshot of a predecessor's
// workflow may still appear: a node finishes a checkpoint whose caller
// died (nodeagent.CheckpointTimeout), and only then uploads its manifest.
const orphanWindow = nodeagent.CheckpointTimeout + time.Minute

// collectOrphans deletes the unreferenced snapshots staged before cutoff
// (this process's start: they belong to dead workflows) at once and then
// every interval until orphanWindow has passed, since nodes may still be
// finishing such snapshots; later ones are this process's own, which its
// workflows record or drop themselves. Failures are logged; the next pass
// or start retries.
func collectOrphans(ctx context.Context, lc *lifecycle.Manager, cutoff time.Time, interval time.Duration, log *slog.Logger) error {
	if interval <= 0 {
		interval = DefaultSnapshotGCInterval
	}
	for {
		if err := lc.CollectGarbage(ctx, cutoff); err != nil && ctx.Err() == nil {
			log.Warn("snapshot garbage collection", "err", err)
		}
		if time.Since(cutoff) > orphanWindow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}
