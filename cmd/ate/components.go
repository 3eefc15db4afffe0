package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"substrate.dev/ate/internal/apiserver"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/flagfile"
	"substrate.dev/ate/internal/identity"
	"substrate.dev/ate/internal/k8s/controller"
	"substrate.dev/ate/internal/k8s/workeridentity"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/logbuf"
	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/pki"
	"substrate.dev/ate/internal/router"
	"substrate.dev/ate/internal/runtimeasset"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/up"
)

// logFlushDelay is the longest an access log line waits to be written:
// short next to anyone reading the log, long enough that a busy router
// writes hundreds of lines per system call instead of one.
const logFlushDelay = 100 * time.Millisecond

// componentCommand returns a server subcommand: flags defined by flags,
// overlaid on --config-file, then run with a JSON logger at --log-level
// and the collector tuned (up.TuneGC). An empty long help says what
// --config-file does.
func componentCommand(use, short, long string, flags func(*pflag.FlagSet), run func(ctx context.Context, log *slog.Logger) error) *cobra.Command {
	var logLevel, configFile string
	if long == "" {
		long = short + `

--config-file FILE reads settings from a YAML file whose keys are the flags
below without their dashes; a flag given on the command line overrides it.`
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := flagfile.Apply(cmd.Flags(), configFile, flagConfigFile); err != nil {
				return err
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return err
			}
			// Access log records are batched (at most logFlushDelay),
			// all others written at once.
			out := logbuf.NewWriter(cmd.ErrOrStderr(), logFlushDelay)
			defer out.Flush()
			json := slog.NewJSONHandler(out, &slog.HandlerOptions{Level: level})
			log := slog.New(logbuf.NewHandler(json, out, router.IsAccessRecord))
			log.Debug("garbage collector target", "gogc", up.TuneGC())
			err := run(cmd.Context(), log)
			if err != nil {
				log.Error("ate "+use+" stopped", "err", err)
			} else {
				log.Info("ate " + use + " stopped")
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, flagConfigFile, "", "YAML file of settings for the flags below, keyed by flag name (flags given here override it)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	flags(f)
	return cmd
}

func apiserverCommand() *cobra.Command {
	var cfg up.APIServerConfig
	return componentCommand("apiserver", "Run the API server alone: the Control API and the node registry over the record store", "",
		func(f *pflag.FlagSet) {
			cfg.Ceilings = &up.CeilingsConfig{}
			apiserverFlags(f, apiserverFields{Store: &cfg.Store, StoreFile: &cfg.StoreFile, Identity: &cfg.Identity, Auth: &cfg.Auth, Ceilings: cfg.Ceilings,
				MaxStreamsPerCaller: &cfg.MaxStreamsPerCaller, ExpiryInterval: &cfg.ExpiryInterval, Heartbeat: &cfg.Heartbeat, LostAfter: &cfg.LostAfter})
			workloadFlags(f, workloadFields{SandboxClass: &cfg.SandboxClass, ImageRoots: &cfg.ImageRoots, RegistryCredentials: &cfg.RegistryCredentials,
				Ceilings: cfg.Ceilings}, up.DefaultImageRoot)
			// Only a separate API server has these.
			f.StringVar(&cfg.DataDir, "data-dir", "", "directory for the snapshot cache and image metadata (default $HOME/.ate-apiserver)")
			f.DurationVar(&cfg.Leases.Duration, "lease-duration", lifecycle.DefaultLeaseDuration,
				"with a shared store: life of an actor's workflow lease unrenewed; an actor whose API server died mid-workflow is taken over after this, or sooner once that server's heartbeat (1.5 s) has lapsed")
			f.DurationVar(&cfg.Leases.RenewEvery, "lease-renew-interval", 0, "with a shared store: how often a running workflow renews its lease (default lease-duration/3)")
			f.Float64Var(&cfg.Leases.Jitter, "lease-jitter", lifecycle.DefaultLeaseJitter, "with a shared store: renewals are spread by ± this fraction of the interval")
			f.StringVar(&cfg.Snapshots, "snapshots", "", "durable snapshot store: s3://bucket/prefix?endpoint=http://host:port&region=R, or a directory (default <data-dir>/snapshots)")
			f.StringVar(&cfg.Addr, "listen", up.DefaultAPIAddr, "gRPC listen address (Control API and node registry)")
			f.StringVar(&cfg.ManagementAddr, "management-addr", "", "listen address of /healthz, /readyz and /metrics (empty: none)")
			pprofFlag(f, &cfg.PprofAddr)
			f.StringVar(&cfg.HTTPAddr, "http-addr", "", httpAddrHelp)
			f.DurationVar(&cfg.SnapshotGCInterval, "snapshot-gc-interval", lifecycle.DefaultOrphanInterval,
				"how often, in the first minutes after start-up, snapshots a killed predecessor's workflows left unreferenced are collected")
			tlsFlags(f, &cfg.TLS, "apiserver")
			f.StringVar(&cfg.NodeIdentity.SignerDir, "node-signer-dir", "", "directory holding the CA (ca.crt, ca.key) that --tls-dir's ca.crt trusts: "+
				"with it, worker Pods get their node certificates from this API server for their projected ServiceAccount tokens (the controller's --worker-tls-bootstrap; empty: no such service)")
			f.StringVar(&cfg.NodeIdentity.Audience, "node-token-audience", workeridentity.DefaultAudience, "the audience worker Pods' tokens must carry (the controller's --worker-token-audience; must differ from --oidc-client-id)")
			f.DurationVar(&cfg.NodeIdentity.TTL, "node-cert-ttl", workeridentity.DefaultTTL, "life of a node certificate issued for a token (renewed by the node at two thirds)")
			f.StringVar(&cfg.NodeIdentity.Kubeconfig, "kubeconfig", "", "with --node-signer-dir: the cluster tokens and Pods are reviewed in (default: in-cluster, else $KUBECONFIG or ~/.kube/config)")
		},
		func(ctx context.Context, log *slog.Logger) error {
			cfg.Logger = log
			return up.RunAPIServer(ctx, cfg)
		})
}

// pprofFlag defines --pprof-addr (httpserve.NewPprof).
func pprofFlag(f *pflag.FlagSet, addr *string) {
	f.StringVar(addr, "pprof-addr", "", "loopback listen address of net/http/pprof's /debug/pprof/, e.g. 127.0.0.1:6060; pprof has no authentication, so "+
		"a non-loopback address is refused: reach it with ssh -L or kubectl port-forward (empty: none)")
}

// httpAddrHelp is --http-addr's help on `ate apiserver` and `ate up`,
// whose defaults differ.
const httpAddrHelp = "the API server's HTTP listen address: the web dashboard at / (keep it on loopback or a private network; empty: none)"

// imageRootHelp is --image-root's help on every command that reads
// images.
const imageRootHelp = "directory oci: and oci-archive: template images may be read from, relative paths against the working directory " +
	"(repeatable; a path outside every root is refused; --image-root= allows none, only registry references)"

// registryCredentialsHelp is --registry-credentials' help on every
// command that reads images; the API server and the nodes should be
// given the same.
const registryCredentialsHelp = "whose credentials registry pulls use: anonymous (public images only), node (this machine's Docker login, for every atespace: " +
	"one team only), or an absolute directory holding <atespace>.json, a Docker config.json per atespace (inline auths only; an atespace without one pulls anonymously) and, optionally, ca.crt: PEM certificates trusted for that directory's pulls besides the system's roots"

// apiFlagHelp is the --api help of every component that dials the API
// server (internal/apidial reads the forms).
const apiFlagHelp = "the API server's gRPC address (required): host:port, a comma-separated list of replicas, dns:///name:port, " +
	"or k8s:///service.namespace:port (the Service's ready endpoints from its EndpointSlices, port by name or number; " +
	"in-cluster config or $KUBECONFIG; needs get on services, list and watch on endpointslices)"

func nodeCommand() *cobra.Command {
	var cfg up.NodeAgentConfig
	var runscAssets []string
	return componentCommand("node", "Run a node agent: gVisor workers, the worker tunnel and the NodeAgent service, registered with an API server", "",
		func(f *pflag.FlagSet) {
			nodeFlags(f, &cfg.Node, &cfg.Gvisor)
			cfg.Ceilings = &up.CeilingsConfig{}
			workloadFlags(f, workloadFields{SandboxClass: &cfg.Node.SandboxClass, ImageRoots: &cfg.ImageRoots, RegistryCredentials: &cfg.RegistryCredentials,
				Ceilings: cfg.Ceilings}, up.DefaultImageRoot)
			// Only a separate node has these.
			f.StringVar(&cfg.API, "api", "", apiFlagHelp)
			f.StringVar(&cfg.DataDir, "data-dir", "", "directory for images, paused checkpoints, the snapshot cache and worker state (default $HOME/.ate-node)")
			f.StringVar(&cfg.Node.Name, "name", "", "node name, unique in the cluster (default the host name)")
			f.StringVar(&cfg.Advertise, "advertise", "127.0.0.1", "address the API server and routers reach this node at; the agent and tunnel listen on it")
			f.IntVar(&cfg.AgentPort, "agent-port", 0, "NodeAgent gRPC port (0 picks one)")
			f.IntVar(&cfg.TunnelPort, "tunnel-port", 0, "worker tunnel port (0 picks one)")
			f.StringVar(&cfg.Snapshots, "snapshots", "", "durable snapshot store: the same URL the API server was given (it refuses a node on another; default <data-dir>/snapshots)")
			f.Int64Var(&cfg.CacheBytes, "snapshot-cache-bytes", 0, "bound of the local cache of downloaded snapshots in bytes (default 10 GiB)")
			f.StringVar(&cfg.ManagementAddr, "management-addr", "", "listen address of /healthz, /readyz and /metrics (empty: none)")
			pprofFlag(f, &cfg.PprofAddr)
			f.StringArrayVar(&runscAssets, "runsc-asset", nil, "ARCH=SHA256@URL (repeatable, one per architecture): fetch runsc from an https://, http:// or file:// URL into <data-dir>/runtime, verify its sha256 and run it instead of --runsc; the value for this machine's architecture is used")
			f.DurationVar(&cfg.DrainTimeout, "drain-timeout", 0, "on SIGTERM, how long the API server may take to checkpoint this node's actors (default 60s)")
			tlsFlags(f, &cfg.TLS, "node (named --name)")
			f.StringVar(&cfg.TLS.BootstrapDir, "tls-bootstrap-dir", "", "instead of --tls-dir: directory holding a Kubernetes ServiceAccount token (token, projected and bound to this Pod, named --name) and ca.crt; "+
				"the node certificate is asked of the API server with it and renewed before expiry (the controller's --worker-tls-bootstrap sets this up)")
		},
		func(ctx context.Context, log *slog.Logger) error {
			cfg.Logger = log
			var err error
			if cfg.RunscAssets, err = runtimeasset.ParseFlags("runsc", runscAssets); err != nil {
				return fmt.Errorf("--runsc-asset %w", err)
			}
			return up.RunNode(ctx, cfg)
		})
}

func routerCommand() *cobra.Command {
	var cfg up.RouterRunConfig
	return componentCommand("router", "Run the HTTP router alone, in front of an API server and its nodes' worker tunnels", "",
		func(f *pflag.FlagSet) {
			routerFlags(f, &cfg.Router)
			// Only a separate router has these.
			f.StringVar(&cfg.API, "api", "", apiFlagHelp)
			f.StringVar(&cfg.Router.Addr, "listen", up.DefaultRouterAddr, "HTTP listen address")
			f.StringVar(&cfg.ManagementAddr, "management-addr", "", "listen address of /healthz, /readyz and /metrics (empty: none)")
			pprofFlag(f, &cfg.PprofAddr)
			tlsFlags(f, &cfg.TLS, "router")
		},
		func(ctx context.Context, log *slog.Logger) error { cfg.Logger = log; return up.RunRouter(ctx, cfg) })
}

// controllerCommand returns `ate controller`: its flags make the
// controller.Config that run (controller.Run outside tests) gets.
func controllerCommand(run func(context.Context, controller.Config) error) *cobra.Command {
	var cfg controller.Config
	return componentCommand("controller", "Run the Kubernetes controller: WorkerPools become Deployments of worker Pods running ate node, and worker Pods' lives are told to the API server", "",
		func(f *pflag.FlagSet) {
			f.StringVar(&cfg.API, "api", "", apiFlagHelp)
			f.StringVar(&cfg.Workers.API, "worker-api", "", "the API server's address as worker Pods reach it, their ate node --api (default --api)")
			f.StringVar(&cfg.Workers.Image, "worker-image", "", "the ate container image of worker Pods whose WorkerPool names none (default: the controller's own image, read from its Pod named by $POD_NAMESPACE/$POD_NAME)")
			f.StringVar(&cfg.Workers.Snapshots, "worker-snapshots", "", "worker Pods' ate node --snapshots: the API server's snapshot store URL")
			f.StringArrayVar(&cfg.Workers.AllowedImages, "worker-allowed-image", nil, "an image WorkerPools may name besides the default worker image (repeatable); a pool naming another runs no Pod")
			f.StringVar(&cfg.Workers.ServiceAccount, "worker-service-account", controller.DefaultWorkerServiceAccount, "ServiceAccount of worker Pods whose WorkerPool names none (it needs the k8s:/// resolver's permissions when --worker-api is k8s:///)")
			f.StringVar(&cfg.Workers.EnvSecret, "worker-env-secret", "", "Secret in each pool's namespace whose keys become worker Pods' environment (S3 credentials); optional")
			f.StringVar(&cfg.Workers.RegistryCredentialsSecret, "worker-registry-credentials-secret", "",
				"Secret in each pool's namespace whose <atespace>.json keys are each atespace's registry credentials (Docker config.json), for worker Pods' ate node --registry-credentials; empty: anonymous pulls")
			f.BoolVar(&cfg.Workers.Insecure, "worker-insecure", false, "worker Pods run ate node --insecure: plaintext, no component identities (this, --worker-tls-bootstrap or --worker-cert-issuer is required)")
			f.BoolVar(&cfg.Workers.TLSBootstrap, "worker-tls-bootstrap", false, "each worker Pod asks the API server (apiserver --node-signer-dir) for its node certificate with a projected ServiceAccount token, "+
				"and trusts it by this controller's --tls-dir ca.crt (put in a ConfigMap <pool>-workers-ca per pool): no cert-manager needed")
			f.StringVar(&cfg.Workers.TokenAudience, "worker-token-audience", controller.DefaultTokenAudience, "with --worker-tls-bootstrap: the audience of worker Pods' tokens (the API server's --node-token-audience)")
			f.StringVar(&cfg.Workers.TrustDomain, "worker-trust-domain", "", "worker Pods' ate node --trust-domain (default: this controller's --trust-domain)")
			f.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster, else $KUBECONFIG or ~/.kube/config)")
			f.StringVar(&cfg.Namespace, "namespace", "", "watch only this namespace's WorkerPools and Pods (default all)")
			f.BoolVar(&cfg.LeaderElect, "leader-elect", true, "elect one active replica through a Lease named ate-controller; the others stand by")
			f.StringVar(&cfg.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election Lease (default the Pod's own)")
			f.DurationVar(&cfg.Resync, "resync", controller.DefaultResync, "how often every WorkerPool is reconciled, and the API server's workers compared with worker Pods, without an event")
			f.DurationVar(&cfg.SyncTimeout, "sync-timeout", controller.DefaultSyncTimeout, "how long a reconcile path waits for its watches before /readyz names what is missing and the path retries")
			f.StringVar(&cfg.ManagementAddr, "management-addr", controller.DefaultManagementAddr, "listen address of /healthz, /readyz and /metrics")
			pprofFlag(f, &cfg.PprofAddr)
			f.StringVar(&cfg.Workers.CertIssuer, "worker-cert-issuer", "", "cert-manager issuer (Issuer/NAME or ClusterIssuer/NAME) whose csi-driver (csi.cert-manager.io) gives each worker Pod its own node certificate (URI SAN spiffe://<domain>/ate/node/<pod name>); or --worker-tls-bootstrap, or --worker-insecure")
			tlsFlags(f, &cfg.TLS, "controller")
		},
		func(ctx context.Context, log *slog.Logger) error { cfg.Logger = log; return run(ctx, cfg) })
}

// identityFlags are the actor identity flags of `ate up` and `ate
// apiserver` (docs/security.md, Actor identity).
func identityFlags(f *pflag.FlagSet, cfg *up.IdentityConfig) {
	f.StringVar(&cfg.IssuerURL, "issuer-url", "", "actor identity tokens' issuer (iss): the URL verifiers reach this API server's HTTP listener at, "+
		"serving /.well-known/openid-configuration and /openid/v1/jwks (default http://<http-addr>; give every replica the same one)")
	f.DurationVar(&cfg.TokenTTL, "identity-token-ttl", identity.DefaultTokenTTL, "lifetime of the identity tokens actors mint (POST http://169.254.17.1/v1/token)")
	f.DurationVar(&cfg.KeyRotation, "identity-key-rotation", identity.DefaultRotation,
		"how long each identity signing key signs; the next is published this long ahead, a retired one stays published until its tokens expired")
}

// selfServiceFlags are the bounds on each worker's self-service endpoint
// (169.254.17.1) of `ate up` and `ate node` (docs/security.md, Limits).
func selfServiceFlags(f *pflag.FlagSet, l *node.SelfServiceLimits) {
	f.IntVar(&l.MaxConns, "self-service-max-conns", node.DefaultSelfServiceMaxConns,
		"most connections one worker's actor may hold to its self-service endpoint (http://169.254.17.1) at once; more are answered 503")
	f.Float64Var(&l.Rate, "self-service-rate", node.DefaultSelfServiceRate,
		"self-service calls (token, alarms, suspend, pause) one actor may make per second on average; more are answered 429 with Retry-After")
	f.IntVar(&l.Burst, "self-service-burst", node.DefaultSelfServiceBurst, "self-service calls one actor may make at once beyond --self-service-rate")
}

// maxStreamsFlag is the per-caller bound on watches and log follows of
// `ate up` and `ate apiserver`.
func maxStreamsFlag(f *pflag.FlagSet, n *int) {
	f.IntVar(n, "max-streams-per-caller", apiserver.DefaultMaxStreamsPerCaller,
		"most watches and log follows (ate get -w, ate logs -f) one caller (user or component) may hold open on this API server at once; more are refused with RESOURCE_EXHAUSTED")
}

// tlsFlags defines a component's transport security flags on f
// (pki.Settings): one of --tls-dir and --insecure is required.
func tlsFlags(f *pflag.FlagSet, s *pki.Settings, whose string) {
	f.StringVar(&s.Dir, "tls-dir", "", "directory holding ca.crt, tls.crt and tls.key (a kubernetes.io/tls Secret, cert-manager, or `ate certs issue`): this "+whose+"'s certificate, re-read when the files change")
	f.BoolVar(&s.Insecure, "insecure", false, "no TLS between components: plaintext gRPC and HTTP (only on a network nobody else reaches)")
	trustDomainFlag(f, &s.TrustDomain)
}

// authFlags are the API server's authentication and authorisation flags
// (kube-apiserver's names; docs/security.md), on `ate apiserver` and
// `ate up`.
func authFlags(f *pflag.FlagSet, c *auth.Config) {
	f.StringVar(&c.TokenAuthFile, "token-auth-file", "", "static bearer tokens: a CSV file of token,user,uid[,\"group1,group2\"] lines (Kubernetes' format)")
	f.StringVar(&c.OIDC.IssuerURL, "oidc-issuer-url", "", "accept JWTs of this OIDC issuer (https; discovery and JWKS are read from it), e.g. a Kubernetes cluster's ServiceAccount issuer")
	f.StringVar(&c.OIDC.ClientID, "oidc-client-id", "", "the audience an OIDC JWT must carry (required with --oidc-issuer-url)")
	f.StringVar(&c.IngressClientID, "oidc-ingress-client-id", "", "the audience of the OIDC issuer's JWTs that actors with ingress policy token accept (must differ from --oidc-client-id; empty: ingress tokens only)")
	f.StringVar(&c.OIDC.UsernameClaim, "oidc-username-claim", "sub", "the JWT claim naming the user")
	f.StringVar(&c.OIDC.UsernamePrefix, "oidc-username-prefix", "", "put before the user name; default \"<issuer>#\" unless the claim is email; \"-\" for none (a ServiceAccount's system:serviceaccount:NS:NAME as is)")
	f.StringVar(&c.OIDC.GroupsClaim, "oidc-groups-claim", "", "the JWT claim listing the user's groups (empty: none)")
	f.StringVar(&c.OIDC.GroupsPrefix, "oidc-groups-prefix", "", "put before each group name, so the issuer cannot name ours (e.g. ate:admins); empty: "+auth.DefaultGroupsPrefix+", - for none")
	f.StringVar(&c.OIDC.CAFile, "oidc-ca-file", "", "PEM CA bundle the OIDC issuer's TLS certificate is verified against (default: the system's)")
	f.StringVar(&c.PolicyFile, "authorization-policy-file", "", "YAML list of role bindings {name, atespace, role, users, groups} in force besides those the API manages (ate create rolebinding)")
}

// egressCeilingFlags are the operator's egress ceiling, which both the
// API server (at template creation) and the nodes (on every connection)
// enforce.
func egressCeilingFlags(f *pflag.FlagSet, c *up.CeilingsConfig) {
	f.StringArrayVar(&c.EgressAllow, "egress-allow", []string{"0.0.0.0/0"},
		"prefix or address templates' egress rules may open (repeatable, or comma-separated); private, shared (100.64.0.0/10), link-local and loopback "+
			"ranges stay closed unless a prefix inside them is given here (the most specific prefix decides)")
	f.StringArrayVar(&c.EgressDeny, "egress-deny", nil,
		"prefix or address templates' egress may never reach, e.g. the cluster's Pod and Service CIDRs and the nodes' addresses (the record and snapshot stores' are denied already; repeatable, or comma-separated)")
}

// evictionCeilingFlags are the operator's eviction ceiling, which the
// API server enforces.
func evictionCeilingFlags(f *pflag.FlagSet, c *up.CeilingsConfig) {
	f.IntVar(&c.MaxEvictionPriority, "max-eviction-priority", up.DefaultMaxEvictionPriority,
		"highest eviction.priority a template may set (higher priorities make other tenants' actors evicted first)")
	f.StringToIntVar(&c.MaxEvictionPriorityFor, "max-eviction-priority-for", nil, "ATESPACE=N,…: --max-eviction-priority for these atespaces")
	f.IntVar(&c.MaxPinnedActors, "max-pinned-actors", up.DefaultMaxPinnedActors,
		"how many RUNNING actors of an atespace eviction.evictable: false keeps from eviction at once (beyond it, the least recently active are evictable; 0 refuses the setting)")
	f.StringToIntVar(&c.MaxPinnedActorsFor, "max-pinned-actors-for", nil, "ATESPACE=N,…: --max-pinned-actors for these atespaces")
}

// volumeLimitFlags bound each volume a node copies out of a sandbox
// (node.Config.VolumeLimits).
func volumeLimitFlags(f *pflag.FlagSet, lim *snapshot.Limits) {
	f.Int64Var(&lim.Bytes, "max-volume-bytes", node.DefaultMaxVolumeBytes,
		"bytes one volume may hold when checkpointed (a sparse file counts its size); a larger volume fails the checkpoint, and a suspend leaves the actor CRASHED at its last snapshot (0: no limit)")
	f.Int64Var(&lim.Entries, "max-volume-entries", node.DefaultMaxVolumeEntries,
		"files, directories and symlinks one volume may hold when checkpointed (0: no limit)")
}
