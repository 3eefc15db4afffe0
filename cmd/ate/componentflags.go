package main

import (
	"cmp"
	"time"

	"github.com/spf13/pflag"

	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/nodeagent"
	"substrate.dev/ate/internal/router"
	"substrate.dev/ate/internal/sandbox/gvisor"
	"substrate.dev/ate/internal/up"
)

// Each component's flags are defined once, here: `ate apiserver`, `ate
// node` and `ate router` call their component's function, `ate up` calls
// all of them, so a flag means the same on both (TestComponentFlagsInUp
// compares them). What only a separate component has — its listeners,
// its certificates, its way of reaching the others — its command defines.

// routerFlags are the router's flags, on `ate router` and `ate up`; both
// keep an up.RouterConfig. Its Addr is not among them: `ate router
// --listen`, `ate up --router-addr`.
func routerFlags(f *pflag.FlagSet, c *up.RouterConfig) {
	f.StringVar(&c.Handler.ActorDomain, "actor-domain", router.DefaultActorDomain, "DNS suffix: <name>.<atespace>.<actor-domain> addresses an actor")
	f.IntVar(&c.Handler.ParkMax, "park-max", router.DefaultParkMax, "most requests waiting for a resume at once")
	f.DurationVar(&c.Handler.ParkBudget, "park-budget", router.DefaultParkBudget, "longest a request waits for its actor to resume")
	f.DurationVar(&c.Handler.ParkGrace, "park-grace", router.DefaultParkGrace,
		"extra wait for a request whose budget ran out while its actor was already being restored on a worker")
	f.DurationVar(&c.DrainDelay, "drain-delay", up.DefaultDrainDelay,
		"on SIGTERM, how long the router keeps serving with /readyz answering 503 before it stops accepting")
	f.DurationVar(&c.DrainTimeout, "drain-timeout", router.DefaultDrainTimeout,
		"on SIGTERM, how long in-flight and parked requests may take to finish once the router stops accepting")
}

// nodeFlags are the node agent's flags, on `ate node` and `ate up`; both
// keep a node.Config and a gvisor.Config. The flags the API server must
// be given alike are workloadFlags.
func nodeFlags(f *pflag.FlagSet, n *node.Config, g *gvisor.Config) {
	f.IntVar(&n.Workers, "workers", up.DefaultWorkers, "number of local gVisor workers")
	f.StringToStringVar(&n.Labels, "labels", nil, "worker labels, key=value,… (templates' worker selectors match them)")
	f.StringVar(&g.RunscPath, "runsc", "", "runsc binary (default $ATE_CACHE/bin/runsc, as installed by hack/install-runsc.sh)")
	f.StringVar(&n.WorkerPrefix, "worker-prefix", "",
		"prefix of worker and network namespace names (default: derived from --data-dir and, on ate node, --name, so two installations on one machine never collide)")
	negatedBoolVar(f, &n.NoStandbys, "standbys",
		"keep a sandbox created ahead on each free worker for the template it ran last, halving the next restore (costs ~55 MB RSS per free worker)")
	f.IntVar(&n.MaxParallelStarts, "max-parallel-starts", 0,
		"most sandbox restores and boots this node runs at once; more wait their turn in order, so a burst is answered first come first served "+
			"instead of all at its end (0: two per CPU)")
	f.StringVar(&n.EgressDNS, "egress-dns", "", "DNS server (host:port) resolving the host names templates allow egress to (default: this machine's resolver)")
	selfServiceFlags(f, &n.SelfService)
	volumeLimitFlags(f, &n.VolumeLimits)
}

// apiserverFields are where the API server's flags put their values:
// `ate apiserver` keeps them in an up.APIServerConfig, `ate up` in
// places of its up.Config.
type apiserverFields struct {
	Store, StoreFile     *string
	Identity             *up.IdentityConfig
	Auth                 *auth.Config
	Ceilings             *up.CeilingsConfig
	MaxStreamsPerCaller  *int
	ExpiryInterval       *time.Duration
	Heartbeat, LostAfter *time.Duration
	// LostAfterDefault is --node-lost-after's default; zero is
	// nodeagent.DefaultLostAfter.
	LostAfterDefault time.Duration
}

// apiserverFlags are the API server's flags, on `ate apiserver` and `ate
// up`. The flags its nodes must be given alike are workloadFlags.
func apiserverFlags(f *pflag.FlagSet, a apiserverFields) {
	f.StringVar(a.Store, "store", "", "record store URL: bolt:///path/ate.db, or postgres://user@host:port/database, which several ate apiserver replicas may share "+
		"(ate up holds one alone); a password here shows in ps, so give such a URL with --store-file or $ATE_STORE (neither: <data-dir>/ate.db)")
	f.StringVar(a.StoreFile, "store-file", "", "file holding the record store URL, password included (e.g. a mounted Secret); instead of --store")
	identityFlags(f, a.Identity)
	authFlags(f, a.Auth)
	maxStreamsFlag(f, a.MaxStreamsPerCaller)
	evictionCeilingFlags(f, a.Ceilings)
	f.DurationVar(a.ExpiryInterval, "expiry-interval", lifecycle.DefaultExpiryInterval,
		"how often actors SUSPENDED or CRASHED past their template's ttl.deleteAfterIdle are deleted (ate get actors --expired lists them)")
	f.DurationVar(a.Heartbeat, "node-heartbeat", nodeagent.DefaultHeartbeat, "how often nodes heartbeat")
	f.DurationVar(a.LostAfter, "node-lost-after", cmp.Or(a.LostAfterDefault, nodeagent.DefaultLostAfter),
		"a node silent this long is lost: its running actors go CRASHED, resumable elsewhere")
}

// workloadFields are where workloadFlags put their values.
type workloadFields struct {
	SandboxClass        *string
	ImageRoots          *[]string
	RegistryCredentials *string
	Ceilings            *up.CeilingsConfig
}

// workloadFlags say what workers run and may reach: the flags the API
// server and its nodes must be given alike, on `ate apiserver`, `ate
// node` and, once, `ate up`. --image-root defaults to imageRoot.
func workloadFlags(f *pflag.FlagSet, w workloadFields, imageRoot string) {
	f.StringVar(w.SandboxClass, "sandbox-class", up.DefaultSandboxClass,
		"sandbox class of the workers: gvisor, or fake (in-process stand-ins emulating the counter example, for trying the control plane); "+
			"the API server and its nodes must be given the same")
	f.StringArrayVar(w.ImageRoots, "image-root", []string{imageRoot}, imageRootHelp)
	f.StringVar(w.RegistryCredentials, "registry-credentials", up.DefaultRegistryCredentials, registryCredentialsHelp)
	egressCeilingFlags(f, w.Ceilings)
}

// trustDomainFlag defines --trust-domain, on every server command.
func trustDomainFlag(f *pflag.FlagSet, domain *string) {
	f.StringVar(domain, "trust-domain", auth.DefaultTrustDomain,
		"SPIFFE trust domain of the components' certificate identities (spiffe://<domain>/ate/<component>/<name>)")
}
