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

	"substrate.dev/ate/internal/cli"
	"substrate.dev/ate/internal/k8s/controller"
	"substrate.dev/ate/internal/pki"
	"substrate.dev/ate/internal/up"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root := cli.NewRootCommand()
	root.AddCommand(upCommand(up.Run), apiserverCommand(), nodeCommand(), routerCommand(), controllerCommand(controller.Run), certsCommand())
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
			// Every component's flags (componentflags.go), each once.
			cfg.Ceilings = &up.CeilingsConfig{}
			apiserverFlags(f, apiserverFields{Store: &cfg.Store, StoreFile: &cfg.StoreFile, Identity: &cfg.Identity, Auth: &cfg.API.Auth, Ceilings: cfg.Ceilings,
				MaxStreamsPerCaller: &cfg.API.MaxStreamsPerCaller, ExpiryInterval: &cfg.API.ExpiryInterval, Heartbeat: &cfg.API.Heartbeat, LostAfter: &cfg.API.LostAfter,
				LostAfterDefault: up.InProcessLostAfter})
			workloadFlags(f, workloadFields{SandboxClass: &cfg.Node.SandboxClass, ImageRoots: &cfg.ImageRoots, RegistryCredentials: &cfg.RegistryCredentials,
				Ceilings: cfg.Ceilings}, up.DefaultUpImageRoot)
			nodeFlags(f, &cfg.Node, &cfg.Gvisor)
			routerFlags(f, &cfg.Router)
			pprofFlag(f, &cfg.Metrics.PprofAddr)
			trustDomainFlag(f, &cfg.PKI.TrustDomain)
			// ate up's own: its listeners (the components' are --listen and
			// the like), its data directory, its CA, the demo.
			f.StringVar(&cfg.DataDir, "data-dir", filepath.Join(home, ".ate"), "directory for the store, snapshots, images, logs, the components' CA (pki/) and the client config")
			f.StringVar(&cfg.API.Addr, "api-addr", up.DefaultAPIAddr, "gRPC Control API listen address")
			f.StringVar(&cfg.Router.Addr, "router-addr", up.DefaultRouterAddr, "HTTP router listen address")
			f.StringVar(&cfg.Tunnel.Addr, "tunnel-addr", up.DefaultTunnelAddr, "worker tunnel listen address")
			f.StringVar(&cfg.Metrics.Addr, "metrics-addr", up.DefaultMetricsAddr,
				"management listen address: Prometheus /metrics (keep it on loopback or a private network; empty disables)")
			f.StringVar(&cfg.HTTP.Addr, "http-addr", up.DefaultHTTPAddr, httpAddrHelp)
			f.BoolVar(&cfg.Demo.Enabled, "demo", false, "create template counter and actor counter-1")
			f.StringVar(&cfg.Demo.Template, "demo-template", up.DefaultDemoTemplate, "template file used by --demo")
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
