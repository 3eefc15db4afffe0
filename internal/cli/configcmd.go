package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"substrate.dev/ate/internal/ateconfig"
)

// newConfigCommand returns `ate config`: the client config file's named
// contexts, managed as `kubectl config` manages a kubeconfig's. It edits
// the file the client verbs read (--config, $ATE_CONFIG,
// $HOME/.ate/config.yaml) and never connects to a server.
func newConfigCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Manage the client config file's contexts: one per installation (a kubeconfig context's name for kubectl ate)",
		Args:  cobra.ArbitraryArgs,
	}
	cmd.PersistentFlags().StringVar(&a.configFlag, flagConfig, "", configFlagUsage)
	cmd.AddCommand(
		newSetContextCommand(a),
		newUseContextCommand(a),
		newGetContextsCommand(a),
		newCurrentContextCommand(a),
		newDeleteContextCommand(a),
	)
	// As kindGroup does for verbs: a typo fails rather than printing help
	// and exiting 0.
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var subs []string
		for _, c := range cmd.Commands() {
			subs = append(subs, c.Name())
		}
		if len(args) == 0 {
			return fmt.Errorf("%s needs a subcommand: %s", cmd.CommandPath(), strings.Join(subs, ", "))
		}
		return fmt.Errorf("unknown subcommand %q for %s: use %s", args[0], cmd.CommandPath(), strings.Join(subs, ", "))
	}
	return cmd
}

// configFile reads the client config file for editing; a missing one is
// an empty file at its path, which a write creates.
func (a *app) configFile() (*ateconfig.File, error) {
	path, err := ateconfig.Path(a.configFlag, a.getenv)
	if err != nil {
		return nil, err
	}
	f, err := ateconfig.LoadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return ateconfig.NewFile(path), nil
	}
	return f, err
}

func newSetContextCommand(a *app) *cobra.Command {
	var set ateconfig.Config
	var current bool
	cmd := &cobra.Command{
		Use:   "set-context NAME",
		Short: "Create a context or change the settings given of an existing one",
		Long: "Create a context or change the settings given of an existing one (the others stay).\n\n" +
			"In Kubernetes mode (kubectl ate, --kubeconfig, --context) the context used is the one named like the " +
			"kubeconfig context, and the server comes from the cluster unless the context sets one:\n\n" +
			"  ate config set-context kind-prod --certificate-authority ca.crt --token $TOKEN",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := a.configFile()
			if err != nil {
				return err
			}
			name := args[0]
			if strings.TrimSpace(name) == "" {
				return fmt.Errorf("client config %s: a context needs a name", f.Path())
			}
			c, existed := storedContext(f, name)
			c.Name = name
			flags := cmd.Flags()
			if flags.Changed(flagServer) {
				c.Server = set.Server
			}
			if flags.Changed(flagCA) {
				// Absolute, so the file means the same from any directory
				// (a relative path in the file is relative to the file).
				if c.CertificateAuthority, err = absCA(set.CertificateAuthority); err != nil {
					return err
				}
			}
			if flags.Changed(flagToken) {
				c.Token = set.Token
			}
			if err := f.SetContext(c); err != nil {
				return err
			}
			if current {
				f.CurrentContext = name
			}
			if err := ateconfig.WriteFile(f.Path(), f); err != nil {
				return err
			}
			verb := "created"
			if existed {
				verb = "modified"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Context %q %s in %s.\n", name, verb, f.Path())
			if current {
				fmt.Fprintf(cmd.OutOrStdout(), "Switched to context %q.\n", name)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&set.Server, flagServer, "", "API server address (none: Kubernetes mode finds it through the cluster)")
	fl.StringVar(&set.CertificateAuthority, flagCA, "", "CA bundle (PEM) the API server's certificate must chain to; stored as an absolute path (empty: plaintext)")
	fl.StringVar(&set.Token, flagToken, "", "bearer token (stored in the file, mode 0600)")
	fl.BoolVar(&current, "current", false, "also make it the current context")
	return cmd
}

// storedContext is f's context called name as written in the file (paths
// unresolved, so a rewrite keeps them), and whether there is one.
func storedContext(f *ateconfig.File, name string) (ateconfig.Context, bool) {
	for _, c := range f.Contexts {
		if c.Name == name {
			return c, true
		}
	}
	return ateconfig.Context{}, false
}

// absCA is path made absolute, after checking it names a file; empty
// stays empty (no CA: plaintext).
func absCA(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("--%s: %w", flagCA, err)
	}
	if _, err := os.Stat(abs); err != nil {
		return "", fmt.Errorf("--%s: %w", flagCA, err)
	}
	return abs, nil
}

func newUseContextCommand(a *app) *cobra.Command {
	var topLevel bool
	cmd := &cobra.Command{
		Use:   "use-context NAME | --top-level",
		Short: "Make a context the current one, used when no --ate-context is given (not in Kubernetes mode)",
		Args:  cobra.RangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if topLevel == (len(args) == 1) {
				return fmt.Errorf("%s needs a context name or --top-level", cmd.CommandPath())
			}
			f, err := a.configFile()
			if err != nil {
				return err
			}
			if topLevel {
				f.CurrentContext = ""
			} else if err := f.UseContext(args[0]); err != nil {
				return err
			}
			if err := ateconfig.WriteFile(f.Path(), f); err != nil {
				return err
			}
			if topLevel {
				fmt.Fprintf(cmd.OutOrStdout(), "Switched to the top-level settings of %s.\n", f.Path())
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "Switched to context %q.\n", args[0])
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&topLevel, "top-level", false, "use the file's top-level settings (what `ate up` writes) again: unset current-context")
	return cmd
}

func newGetContextsCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "get-contexts",
		Short: "List the contexts of the client config file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := a.configFile()
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 8, 3, ' ', 0)
			fmt.Fprintln(tw, "CURRENT\tNAME\tSERVER")
			for _, c := range f.Contexts {
				mark := ""
				if c.Name == f.CurrentContext {
					mark = "*"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", mark, c.Name, c.Server)
			}
			return tw.Flush()
		},
	}
}

func newCurrentContextCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "current-context",
		Short: "Print the current context's name",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := a.configFile()
			if err != nil {
				return err
			}
			if f.CurrentContext == "" {
				return fmt.Errorf("client config %s sets no current-context: its top-level settings are used", f.Path())
			}
			fmt.Fprintln(cmd.OutOrStdout(), f.CurrentContext)
			return nil
		},
	}
}

func newDeleteContextCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "delete-context NAME",
		Short: "Remove a context from the client config file",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := a.configFile()
			if err != nil {
				return err
			}
			wasCurrent, err := f.DeleteContext(args[0])
			if err != nil {
				return err
			}
			if err := ateconfig.WriteFile(f.Path(), f); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Deleted context %q from %s.\n", args[0], f.Path())
			if wasCurrent {
				fmt.Fprintln(cmd.OutOrStdout(), "It was the current context: the top-level settings are used now.")
			}
			return nil
		},
	}
}
