// Package cli is the `ate` command-line client: kubectl-like verbs (get,
// create, delete, wait, suspend, pause, resume, revert) that talk to the API
// server's gRPC Control service and print tables, JSON or YAML.
//
// The package builds the client half of the `ate` binary only. cmd/ate adds
// the server subcommand `ate up` (internal/up) to the root returned by
// NewRootCommand and runs it through Main:
//
//	root := cli.NewRootCommand()
//	root.AddCommand(upCommand(up.Run))
//	os.Exit(cli.Main(ctx, root))
//
// The client flags (--config, --ate-context, --server, -n/--atespace,
// -o/--output, --timeout, --kubeconfig, --context, --ate-namespace) belong
// to the client verbs, so a server subcommand added
// beside them neither lists nor accepts them. They may still be given
// before the verb (`ate --server HOST:PORT get actors`). The client config
// file they find the server with is internal/ateconfig, which `ate up`
// writes; its named contexts (--ate-context, else current-context) are
// managed with `ate config`, as kubectl's are with `kubectl config`.
//
// As a kubectl plugin (the binary installed as kubectl-ate on $PATH, so
// `kubectl ate get actors` runs it), or whenever --kubeconfig or
// --context is given, the server is found through Kubernetes instead:
// the API server Service ate-apiserver's port grpc in --ate-namespace
// (default ate-system), k8s:///ate-apiserver.ate-system:grpc, reached
// with the kubeconfig's cluster and credentials (internal/apidial). The
// user needs get on that Service and list and watch on endpointslices in
// that namespace. --server still wins. The flag is --ate-namespace, not
// -n/--namespace, because -n is the atespace. Of the client config file,
// Kubernetes mode uses only the context named like the kubeconfig context
// (--context, else the kubeconfig's current-context): a TLS installation
// is reached with `ate config set-context <kube-context>
// --certificate-authority ca.crt --token T` (clientConfig).
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"substrate.dev/ate/internal/ateconfig"
	"substrate.dev/ate/internal/names"
)

// Client flag names: every client verb takes them (addClientFlags).
const (
	flagConfig = "config"
	flagServer = "server"
	// flagCA is kubectl's name for the same setting.
	flagCA       = "certificate-authority"
	flagToken    = "token"
	flagAtespace = "atespace"
	flagOutput   = "output"
	flagTimeout  = "timeout"

	// flagATEContext picks a context of the client config file; not
	// "context", which is kubectl's name for the kubeconfig context.
	flagATEContext = "ate-context"

	flagKubeconfig   = "kubeconfig"
	flagKubeContext  = "context"
	flagATENamespace = "ate-namespace"
)

// configFlagUsage is --config's help, on the client verbs and `ate config`.
const configFlagUsage = "client config file (default $" + ateconfig.EnvVar + ", else $HOME/.ate/config.yaml)"

// Kubernetes mode (package doc): the Service our manifests (deploy/)
// give the API server, its gRPC port's name, and its namespace.
const (
	KubeService          = "ate-apiserver"
	KubePortName         = "grpc"
	DefaultKubeNamespace = "ate-system"
	// KubectlPluginName is the binary's name as a kubectl plugin.
	KubectlPluginName = "kubectl-ate"
)

// DefaultTimeout bounds each RPC unless --timeout says otherwise. It is long
// because ResumeActor legitimately waits for a worker to free up.
const DefaultTimeout = 60 * time.Second

// defaultPollInterval paces `ate wait`: a resume takes well under a second, so
// polling twice a second reports it promptly without loading the server.
const defaultPollInterval = 500 * time.Millisecond

// Option adjusts NewRootCommand; the defaults suit the real binary, options
// exist so tests can pin the environment and clock.
type Option func(*app)

// WithGetenv replaces os.Getenv for $ATE_CONFIG and $HOME lookups.
func WithGetenv(getenv func(string) string) Option {
	return func(a *app) { a.getenv = getenv }
}

// WithProgramName sets the name the binary was invoked by (default the
// base name of os.Args[0]); KubectlPluginName selects Kubernetes mode.
func WithProgramName(name string) Option {
	return func(a *app) { a.program = name }
}

// WithNow replaces time.Now for the AGE column.
func WithNow(now func() time.Time) Option {
	return func(a *app) { a.now = now }
}

// WithPollInterval sets how often `ate wait` polls GetActor.
func WithPollInterval(d time.Duration) Option {
	return func(a *app) { a.pollInterval = d }
}

// app carries one invocation's dependencies and parsed client flags. It is
// built per root command and used by one goroutine at a time (cobra runs one
// command), so it needs no locking.
type app struct {
	getenv       func(string) string
	now          func() time.Time
	pollInterval time.Duration
	program      string // base name the binary was invoked by

	configFlag string
	ateContext string
	server     string
	ca         string
	token      string
	atespace   string
	output     string
	timeout    time.Duration

	kubeconfig   string
	kubeContext  string
	ateNamespace string
}

// NewRootCommand returns the `ate` root command with the client verbs
// attached, each taking the client flags. The caller adds server
// subcommands with root.AddCommand and runs the result with Main; they
// inherit no flags from the root.
func NewRootCommand(opts ...Option) *cobra.Command {
	a := &app{getenv: os.Getenv, now: time.Now, pollInterval: defaultPollInterval, program: filepath.Base(os.Args[0])}
	for _, o := range opts {
		o(a)
	}
	root := &cobra.Command{
		Use:   "ate",
		Short: "Run stateful actors in sandboxes; suspend them when idle, resume on demand",
		// Main prints errors once, in our format; usage on every failed RPC
		// would bury the message.
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	verbs := append([]*cobra.Command{
		newGetCommand(a),
		newCreateCommand(a),
		newDeleteCommand(a),
		newUpdateCommand(a),
		newWaitCommand(a),
		newAlarmCommand(a),
		newTagCommand(a),
		newLogsCommand(a),
		newExecCommand(a),
		newCpCommand(a),
	}, newActorVerbCommands(a)...)
	for _, v := range verbs {
		a.addClientFlags(v)
	}
	root.AddCommand(verbs...)
	// `ate config` edits the file the client flags read; of them it
	// takes only --config.
	root.AddCommand(newConfigCommand(a))
	if a.program == KubectlPluginName {
		// Usage lines read `kubectl ate get …`, the way it is run.
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl ate"}
	}
	return root
}

// addClientFlags defines the client flags as persistent flags of verb, so
// its kinds inherit them. Every verb binds the same fields of a; cobra
// parses the flags of the one command it runs. Flags given before the verb
// (`ate -o json get actors`) are parsed by that command too.
func (a *app) addClientFlags(verb *cobra.Command) {
	f := verb.PersistentFlags()
	f.StringVar(&a.configFlag, flagConfig, "", configFlagUsage)
	f.StringVar(&a.ateContext, flagATEContext, "", "context of the client config file to use (default its current-context, else its top-level settings; not in Kubernetes mode, which uses the context named after the kubeconfig context)")
	f.StringVar(&a.token, flagToken, "", "bearer token for the API server (overrides the config file's token:)")
	f.StringVar(&a.server, flagServer, "", "API server address: host:port, a comma-separated list, dns:///name:port or k8s:///service.namespace:port (overrides the config file and Kubernetes mode)")
	f.StringVar(&a.ca, flagCA, "", "CA bundle (PEM) the API server's certificate must chain to (overrides the config file's certificate-authority; none: plaintext)")
	f.StringVarP(&a.atespace, flagAtespace, "n", names.DefaultAtespace, "atespace of the named objects")
	f.StringVarP(&a.output, flagOutput, "o", formatTable, "output format: table, json or yaml")
	f.DurationVar(&a.timeout, flagTimeout, DefaultTimeout, "deadline for each call to the server (for wait: the whole wait)")
	f.StringVar(&a.kubeconfig, flagKubeconfig, "", "kubeconfig file: find the API server as Service "+KubeService+" in --"+flagATENamespace+
		" through this cluster (default as a kubectl plugin: $KUBECONFIG, else ~/.kube/config)")
	f.StringVar(&a.kubeContext, flagKubeContext, "", "kubeconfig context to use (implies Kubernetes mode, as --"+flagKubeconfig+")")
	f.StringVar(&a.ateNamespace, flagATENamespace, DefaultKubeNamespace, "Kubernetes namespace of the "+KubeService+" Service (Kubernetes mode only)")
}

// kubeMode reports whether the server is found through Kubernetes:
// invoked as kubectl-ate, or --kubeconfig or --context given.
func (a *app) kubeMode() bool {
	return a.program == KubectlPluginName || a.kubeconfig != "" || a.kubeContext != ""
}

// Main runs root under ctx and returns the process exit code: 0 on success,
// an ExitCodeError's code as is (`ate exec`), else 1 after printing
// "Error: <message>" to root's error stream. cmd/ate's main
// does no more than os.Exit(cli.Main(ctx, root)).
func Main(ctx context.Context, root *cobra.Command) int {
	// Set here too so commands built elsewhere print through this path only.
	root.SilenceErrors = true
	root.SilenceUsage = true
	if err := root.ExecuteContext(ctx); err != nil {
		if code, ok := errors.AsType[*ExitCodeError](err); ok {
			return code.Code
		}
		fmt.Fprintf(root.ErrOrStderr(), "Error: %s\n", err)
		return 1
	}
	return 0
}

// kindGroup makes cmd a verb whose subcommands are the kinds it acts on.
// Run without a known kind it fails and lists the kinds, rather than printing
// help and exiting 0, so a script that says `ate delete actr x` notices.
func kindGroup(cmd *cobra.Command, kinds ...*cobra.Command) {
	cmd.AddCommand(kinds...)
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var list []string
		for _, k := range kinds {
			list = append(list, k.Name())
		}
		if len(args) == 0 {
			return fmt.Errorf("%s needs a kind: %s", cmd.CommandPath(), strings.Join(list, ", "))
		}
		return fmt.Errorf("unknown kind %q for %s: use %s", args[0], cmd.CommandPath(), strings.Join(list, ", "))
	}
}

// validateGlobals checks the client flags every verb relies on before it
// does any work, so a typo fails fast instead of after a round trip.
func (a *app) validateGlobals() error {
	switch a.output {
	case formatTable, formatJSON, formatYAML:
	default:
		return fmt.Errorf("unknown output format %q: use table, json or yaml", a.output)
	}
	if a.timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, got %s", a.timeout)
	}
	return nil
}

// atespaceName returns the validated --atespace value.
func (a *app) atespaceName() (string, error) {
	if err := names.ValidateLabel("atespace", a.atespace); err != nil {
		return "", err
	}
	return a.atespace, nil
}

// actorKey parses an actor argument, "NAME" in --atespace or "ATESPACE/NAME".
func (a *app) actorKey(arg string) (names.ActorKey, error) {
	return names.ParseActorKey(arg, a.atespace)
}

// templateKey validates a template argument and pairs it with --atespace.
func (a *app) templateKey(arg string) (atespace, name string, err error) {
	if atespace, err = a.atespaceName(); err != nil {
		return "", "", err
	}
	if err := names.ValidateLabel("template name", arg); err != nil {
		return "", "", err
	}
	return atespace, arg, nil
}
