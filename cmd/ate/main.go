// Command ate is Substrate's single binary: the CLI client verbs and the
// server subcommands. main only parses flags and wires packages.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"substrate.dev/ate/internal/cli"
	"substrate.dev/ate/internal/router"
	"substrate.dev/ate/internal/up"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root := cli.NewRootCommand()
	root.AddCommand(upCommand())
	code := cli.Main(ctx, root)
	stop()
	os.Exit(code)
}

func upCommand() *cobra.Command {
	cfg := up.Config{}
	var logLevel string
	var standbys bool
	home, _ := os.UserHomeDir()
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run everything on this machine: API server, embedded store, node agent with gVisor workers, router",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return err
			}
			cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			cfg.NoStandbys = !standbys
			gogc := up.TuneGC()
			cfg.Logger.Debug("garbage collector target", "gogc", gogc)
			err := up.Run(cmd.Context(), cfg)
			// After every deferred teardown in Run: the workers and their
			// network namespaces are gone, the store is closed.
			cfg.Logger.Info("ate up stopped", "err", err)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", home+"/.ate", "directory for the store, snapshots, images and logs")
	f.IntVar(&cfg.Workers, "workers", 4, "number of local gVisor workers")
	f.StringVar(&cfg.APIAddr, "api-addr", "127.0.0.1:7070", "gRPC Control API listen address")
	f.StringVar(&cfg.RouterAddr, "router-addr", "127.0.0.1:8080", "HTTP router listen address")
	f.StringVar(&cfg.TunnelAddr, "tunnel-addr", "127.0.0.1:0", "worker tunnel listen address")
	f.StringVar(&cfg.ActorDomain, "actor-domain", router.DefaultActorDomain, "DNS suffix: <name>.<atespace>.<actor-domain> addresses an actor")
	f.IntVar(&cfg.ParkMax, "park-max", router.DefaultParkMax, "most requests waiting for a resume at once")
	f.DurationVar(&cfg.ParkBudget, "park-budget", router.DefaultParkBudget, "longest a request waits for its actor to resume")
	f.DurationVar(&cfg.ParkGrace, "park-grace", router.DefaultParkGrace,
		"extra wait for a request whose budget ran out while its actor was already being restored on a worker")
	f.DurationVar(&cfg.DrainDelay, "drain-delay", 5*time.Second,
		"on SIGTERM, how long the router keeps serving with /readyz answering 503 before it stops accepting")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", router.DefaultDrainTimeout,
		"on SIGTERM, how long in-flight and parked requests may take to finish once the router stops accepting")
	f.StringVar(&cfg.SandboxClass, "sandbox-class", "gvisor", "sandbox class of the workers: gvisor, or fake (in-process stand-ins emulating the counter example, for trying the control plane)")
	f.StringVar(&cfg.RunscPath, "runsc", "", "runsc binary (default $ATE_CACHE/bin/runsc, as installed by hack/install-runsc.sh)")
	f.StringVar(&cfg.WorkerPrefix, "worker-prefix", "", "prefix of worker and network namespace names (default: derived from --data-dir)")
	f.BoolVar(&standbys, "standbys", true,
		"keep a sandbox created ahead on each free worker for the template it ran last, halving the next restore (costs ~55 MB RSS per free worker)")
	f.BoolVar(&cfg.Demo, "demo", false, "create template counter and actor counter-1")
	f.StringVar(&cfg.DemoTemplate, "demo-template", "examples/counter/template.yaml", "template file used by --demo")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}
