// Command ate is Substrate's single binary: the CLI client verbs
// (internal/cli) and the server subcommand `ate up` (internal/up). main
// only parses flags and wires packages.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/cli"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/pki"
	"substrate.dev/ate/internal/router"
	"substrate.dev/ate/internal/up"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root := cli.NewRootCommand()
	root.AddCommand(upCommand(up.Run), apiserverCommand(), nodeCommand(), routerCommand(), controllerCommand(runController), certsCommand())
	code := cli.Main(ctx, root)
	stop()
	os.Exit(code)
}

// flagConfigFile names a server subcommand's settings file; it is the one flag the
// file cannot set.
const flagConfigFile = "config-file"

// upCommand returns `ate up`: its flags, overlaid on --config-file's
// settings, make the up.Config that run (up.Run outside tests) gets.
func upCommand(run func(context.Context, up.Config) error) *cobra.Command {
	var cfg up.Config
	home, _ := os.UserHomeDir()
	return componentCommand("up", "Run everything on this machine: API server, embedded store, node agent with gVisor workers, router",
		`Run everything on this machine: API server, embedded store, node agent with gVisor workers, router.

--config-file FILE reads settings from a YAML file whose keys are the flags
below without their dashes, with the values the flags take, e.g.

  workers: 8
  park-budget: 45s   # durations are Go duration strings
  standbys: false

A flag given on the command line overrides the file; a key that is not a
flag is an error.`,
		func(f *pflag.FlagSet) {
			f.StringVar(&cfg.DataDir, "data-dir", filepath.Join(home, ".ate"), "directory for the store, snapshots, images, logs and the client config")
			storeFlags(f, &cfg.Store, &cfg.StoreFile, "bolt:///path/ate.db, or postgres://user@host:port/database", "<data-dir>/ate.db")
			f.IntVar(&cfg.Node.Workers, "workers", up.DefaultWorkers, "number of local gVisor workers")
			f.StringVar(&cfg.API.Addr, "api-addr", up.DefaultAPIAddr, "gRPC Control API listen address")
			authFlags(f, &cfg.API.Auth)
			maxStreamsFlag(f, &cfg.API.MaxStreamsPerCaller)
			f.DurationVar(&cfg.API.ExpiryInterval, "expiry-interval", lifecycle.DefaultExpiryInterval,
				"how often actors SUSPENDED or CRASHED past their template's ttl.deleteAfterIdle are deleted (ate get actors --expired lists them)")
			f.StringVar(&cfg.Router.Addr, "router-addr", up.DefaultRouterAddr, "HTTP router listen address")
			f.StringVar(&cfg.Tunnel.Addr, "tunnel-addr", up.DefaultTunnelAddr, "worker tunnel listen address")
			f.StringVar(&cfg.Metrics.Addr, "metrics-addr", up.DefaultMetricsAddr,
				"management listen address: Prometheus /metrics (keep it on loopback or a private network; empty disables)")
			pprofFlag(f, &cfg.Metrics.PprofAddr)
			f.StringVar(&cfg.HTTP.Addr, "http-addr", up.DefaultHTTPAddr,
				"the API server's HTTP listen address: the web dashboard at / (keep it on loopback or a private network; empty disables)")
			identityFlags(f, &cfg.Identity)
			f.StringVar(&cfg.Router.Handler.ActorDomain, "actor-domain", router.DefaultActorDomain, "DNS suffix: <name>.<atespace>.<actor-domain> addresses an actor")
			f.IntVar(&cfg.Router.Handler.ParkMax, "park-max", router.DefaultParkMax, "most requests waiting for a resume at once")
			f.DurationVar(&cfg.Router.Handler.ParkBudget, "park-budget", router.DefaultParkBudget, "longest a request waits for its actor to resume")
			f.DurationVar(&cfg.Router.Handler.ParkGrace, "park-grace", router.DefaultParkGrace,
				"extra wait for a request whose budget ran out while its actor was already being restored on a worker")
			f.DurationVar(&cfg.Router.DrainDelay, "drain-delay", up.DefaultDrainDelay,
				"on SIGTERM, how long the router keeps serving with /readyz answering 503 before it stops accepting")
			f.DurationVar(&cfg.Router.DrainTimeout, "drain-timeout", router.DefaultDrainTimeout,
				"on SIGTERM, how long in-flight and parked requests may take to finish once the router stops accepting")
			f.StringVar(&cfg.Node.SandboxClass, "sandbox-class", up.DefaultSandboxClass, "sandbox class of the workers: gvisor, or fake (in-process stand-ins emulating the counter example, for trying the control plane)")
			f.StringVar(&cfg.Gvisor.RunscPath, "runsc", "", "runsc binary (default $ATE_CACHE/bin/runsc, as installed by hack/install-runsc.sh)")
			f.StringVar(&cfg.Node.WorkerPrefix, "worker-prefix", "", "prefix of worker and network namespace names (default: derived from --data-dir)")
			f.StringArrayVar(&cfg.ImageRoots, "image-root", []string{up.DefaultUpImageRoot}, imageRootHelp)
			f.StringVar(&cfg.RegistryCredentials, "registry-credentials", up.DefaultRegistryCredentials, registryCredentialsHelp)
			cfg.Ceilings = &up.CeilingsConfig{}
			ceilingFlags(f, cfg.Ceilings)
			f.StringVar(&cfg.Node.EgressDNS, "egress-dns", "", "DNS server (host:port) resolving the host names templates allow egress to (default: this machine's resolver)")
			selfServiceFlags(f, &cfg.Node.SelfService)
			volumeLimitFlags(f, &cfg.Node.VolumeLimits)
			negatedBoolVar(f, &cfg.Node.NoStandbys, "standbys",
				"keep a sandbox created ahead on each free worker for the template it ran last, halving the next restore (costs ~55 MB RSS per free worker)")
			f.BoolVar(&cfg.Demo.Enabled, "demo", false, "create template counter and actor counter-1")
			f.StringVar(&cfg.Demo.Template, "demo-template", up.DefaultDemoTemplate, "template file used by --demo")
			f.StringVar(&cfg.PKI.TrustDomain, "trust-domain", auth.DefaultTrustDomain, "SPIFFE trust domain of the components' certificates (its CA is <data-dir>/pki)")
			f.DurationVar(&cfg.PKI.LeafTTL, "cert-ttl", pki.DefaultLeafTTL, "life of the components' certificates, renewed at two thirds of it")
			_ = f.MarkHidden("cert-ttl") // for rotation tests
		},
		func(ctx context.Context, log *slog.Logger) error {
			cfg.Logger, cfg.Demo.LoadTemplate = log, cli.LoadTemplateFile
			// Returns after every deferred teardown in Run: the workers and
			// their network namespaces are gone, the store is closed.
			return run(ctx, cfg)
		})
}
