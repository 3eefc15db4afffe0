package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"substrate.dev/ate/internal/cli"
	"substrate.dev/ate/internal/k8s/controller"
	"substrate.dev/ate/internal/nodeagent"
	"substrate.dev/ate/internal/up"
)

// runUp runs `ate up args...` under the real root command with a run that
// only records the up.Config it is given.
func runUp(t *testing.T, args ...string) (up.Config, string, error) {
	t.Helper()
	var got up.Config
	root := cli.NewRootCommand()
	root.AddCommand(upCommand(func(_ context.Context, cfg up.Config) error {
		got = cfg
		return nil
	}))
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"up"}, args...))
	err := root.ExecuteContext(t.Context())
	return got, out.String(), err
}

// comparable drops what reflect.DeepEqual cannot compare (funcs, a
// logger), after checking the logger's level is level.
func comparable(t *testing.T, cfg up.Config, level slog.Level) up.Config {
	t.Helper()
	if cfg.Logger == nil {
		t.Fatal("no logger")
	}
	if !cfg.Logger.Enabled(t.Context(), level) || cfg.Logger.Enabled(t.Context(), level-1) {
		t.Errorf("logger level is not %v", level)
	}
	if cfg.Demo.LoadTemplate == nil {
		t.Error("no template loader for --demo")
	}
	cfg.Logger, cfg.Demo.LoadTemplate = nil, nil
	return cfg
}

// clientFlags are the CLI's: `ate up` reads none of them.
var clientFlags = []string{"config", "server", "timeout", "atespace", "output"}

// TestUpListsOnlyItsFlags: `ate up` neither lists nor accepts the client
// flags, and every flag it lists ends up in the up.Config.
func TestUpListsOnlyItsFlags(t *testing.T) {
	root := cli.NewRootCommand()
	upCmd := upCommand(nil)
	root.AddCommand(upCmd)
	var help bytes.Buffer
	root.SetOut(&help)
	root.SetArgs([]string{"up", "--help"})
	if err := root.ExecuteContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, name := range clientFlags {
		if upCmd.Flags().Lookup(name) != nil || upCmd.InheritedFlags().Lookup(name) != nil {
			t.Errorf("ate up has client flag --%s", name)
		}
		if strings.Contains(help.String(), "--"+name+" ") {
			t.Errorf("ate up --help lists --%s:\n%s", name, help.String())
		}
	}
	for _, short := range []string{"o", "n"} {
		if upCmd.Flags().ShorthandLookup(short) != nil || upCmd.InheritedFlags().ShorthandLookup(short) != nil {
			t.Errorf("ate up has client flag -%s", short)
		}
		if strings.Contains(help.String(), "-"+short+",") {
			t.Errorf("ate up --help lists -%s:\n%s", short, help.String())
		}
	}
	if _, _, err := runUp(t, "-o", "json"); err == nil {
		t.Error("ate up -o json: no error")
	}

	base, _, err := runUp(t)
	if err != nil {
		t.Fatal(err)
	}
	baseCfg := comparable(t, base, slog.LevelInfo)
	for _, f := range ownFlags(upCmd) {
		t.Run(f.Name, func(t *testing.T) {
			v := otherValue(f)
			cfg, _, err := runUp(t, "--"+f.Name+"="+v)
			if err != nil {
				t.Fatal(err)
			}
			level := slog.LevelInfo
			if f.Name == "log-level" {
				level = slog.LevelDebug
			}
			if reflect.DeepEqual(comparable(t, cfg, level), baseCfg) && f.Name != "log-level" {
				t.Errorf("--%s=%s left the config as it was: %+v", f.Name, v, cfg)
			}
		})
	}
}

// ownFlags are the flags that set up.Config: all but help and the
// settings file.
func ownFlags(cmd *cobra.Command) []*pflag.Flag {
	var out []*pflag.Flag
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" && f.Name != flagConfigFile {
			out = append(out, f)
		}
	})
	return out
}

// otherValue is a valid value for f other than its default.
func otherValue(f *pflag.Flag) string {
	switch {
	case f.Name == "log-level":
		return "debug"
	case f.Value.Type() == "bool" && f.DefValue == "true":
		return "false"
	case f.Value.Type() == "bool":
		return "true"
	case f.Value.Type() == "int", f.Value.Type() == "int64":
		return "7"
	case f.Value.Type() == "duration":
		return "3s"
	case f.Value.Type() == "float64":
		return "0.5"
	case f.Value.Type() == "stringToInt":
		return "team=7"
	case f.Value.Type() == "stringToString":
		return "team=blue"
	default:
		return "other-" + f.Name
	}
}

func writeFile(t *testing.T, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "up.yaml")
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestUpConfigFile: --config-file sets what the flags set, flags given
// override it, and a key that is no flag or a value its flag refuses fail
// naming the key.
func TestUpConfigFile(t *testing.T) {
	upCmd := upCommand(nil)
	var file strings.Builder
	var args []string
	for _, f := range ownFlags(upCmd) {
		v := otherValue(f)
		file.WriteString(f.Name + ": \"" + v + "\"\n")
		args = append(args, "--"+f.Name+"="+v)
	}

	t.Run("file only", func(t *testing.T) {
		fromFlags, _, err := runUp(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		fromFile, _, err := runUp(t, "--config-file", writeFile(t, file.String()))
		if err != nil {
			t.Fatal(err)
		}
		if a, b := comparable(t, fromFile, slog.LevelDebug), comparable(t, fromFlags, slog.LevelDebug); !reflect.DeepEqual(a, b) {
			t.Errorf("from the file:\n%+v\nfrom flags:\n%+v", a, b)
		}
	})
	t.Run("plain YAML values", func(t *testing.T) {
		cfg, _, err := runUp(t, "--config-file", writeFile(t, "workers: 2\npark-budget: 1m30s\nstandbys: false\ndemo: true\n"))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Node.Workers != 2 || cfg.Router.Handler.ParkBudget.String() != "1m30s" || !cfg.Node.NoStandbys || !cfg.Demo.Enabled {
			t.Errorf("config %+v", cfg)
		}
	})
	t.Run("flag overrides file", func(t *testing.T) {
		path := writeFile(t, "workers: 2\napi-addr: 127.0.0.1:1\nstandbys: false\ndrain-delay: 1s\n")
		cfg, _, err := runUp(t, "--workers", "3", "--config-file", path, "--standbys", "--drain-delay=0s")
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Node.Workers != 3 || cfg.API.Addr != "127.0.0.1:1" || cfg.Node.NoStandbys || cfg.Router.DrainDelay != 0 {
			t.Errorf("workers %d, api %s, no standbys %v, drain delay %s; want 3, 127.0.0.1:1 (from the file), false, 0s",
				cfg.Node.Workers, cfg.API.Addr, cfg.Node.NoStandbys, cfg.Router.DrainDelay)
		}
	})
	for _, tc := range []struct{ name, file, want string }{
		{"unknown key", "workers: 2\nwrokers: 3\n", `unknown key "wrokers"`},
		{"client flag", "server: 127.0.0.1:7070\n", `unknown key "server"`},
		{"the file itself", "config-file: other.yaml\n", `unknown key "config-file"`},
		{"bad duration", "park-budget: 30\n", `park-budget: "30" is not a duration like 30s or 5m`},
		{"bad number", "workers: four\n", `workers: "four" is not a whole number`},
		{"bad boolean", "standbys: maybe\n", `standbys: "maybe" is not true or false`},
		{"not a value", "workers: [1, 2]\n", `workers: want a single value`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, tc.file)
			_, _, err := runUp(t, "--config-file", path)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %v; want one naming %s and containing %q", err, path, tc.want)
			}
		})
	}
}

// TestUpMetricsAddr: the management listener is on loopback by default,
// and an empty --metrics-addr (flag or file) turns it off.
func TestUpMetricsAddr(t *testing.T) {
	cfg, _, err := runUp(t)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Metrics.Addr != up.DefaultMetricsAddr || !strings.HasPrefix(cfg.Metrics.Addr, "127.0.0.1:") {
		t.Errorf("default metrics addr %q, want %q", cfg.Metrics.Addr, up.DefaultMetricsAddr)
	}
	for _, args := range [][]string{
		{"--metrics-addr="},
		{"--config-file", writeFile(t, "metrics-addr: \"\"\n")},
	} {
		cfg, _, err := runUp(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Metrics.Addr != "" {
			t.Errorf("%v: metrics addr %q, want none", args, cfg.Metrics.Addr)
		}
	}
}

// TestUpHTTPAddr: the dashboard's listener is on loopback by default, and
// an empty --http-addr (flag or file) turns it off.
func TestUpHTTPAddr(t *testing.T) {
	cfg, _, err := runUp(t)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTP.Addr != up.DefaultHTTPAddr || !strings.HasPrefix(cfg.HTTP.Addr, "127.0.0.1:") {
		t.Errorf("default http addr %q, want %q", cfg.HTTP.Addr, up.DefaultHTTPAddr)
	}
	for _, args := range [][]string{
		{"--http-addr="},
		{"--config-file", writeFile(t, "http-addr: \"\"\n")},
	} {
		cfg, _, err := runUp(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.HTTP.Addr != "" {
			t.Errorf("%v: http addr %q, want none", args, cfg.HTTP.Addr)
		}
	}
}

// TestControllerFlags: every `ate controller` flag ends up in the
// controller.Config, and the defaults are the design's.
func TestControllerFlags(t *testing.T) {
	runCtl := func(args ...string) controller.Config {
		t.Helper()
		var got controller.Config
		root := cli.NewRootCommand()
		root.AddCommand(controllerCommand(func(_ context.Context, cfg controller.Config) error { got = cfg; return nil }))
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append([]string{"controller"}, args...))
		if err := root.ExecuteContext(t.Context()); err != nil {
			t.Fatalf("%v: %s", err, out.String())
		}
		if got.Logger == nil {
			t.Fatal("no logger")
		}
		got.Logger = nil
		return got
	}
	base := runCtl()
	if !base.LeaderElect || base.ManagementAddr != ":8081" || base.SyncTimeout != controller.DefaultSyncTimeout {
		t.Errorf("defaults %+v", base)
	}
	for _, f := range ownFlags(controllerCommand(nil)) {
		if f.Name == "log-level" {
			continue
		}
		t.Run(f.Name, func(t *testing.T) {
			if reflect.DeepEqual(runCtl("--"+f.Name+"="+otherValue(f)), base) {
				t.Errorf("--%s left the config as it was", f.Name)
			}
		})
	}
}

// TestUpNodeLostAfter: `ate up`'s in-process node gets a lease of
// up.InProcessLostAfter unless --node-lost-after says otherwise; at a
// cluster's 5 s a burst that stalled the store made ate up declare its
// own node lost.
func TestUpNodeLostAfter(t *testing.T) {
	cfg, _, err := runUp(t)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.API.LostAfter != up.InProcessLostAfter || up.InProcessLostAfter <= nodeagent.DefaultLostAfter {
		t.Errorf("ate up's node lease = %s, want up.InProcessLostAfter (%s), longer than a cluster's %s", cfg.API.LostAfter, up.InProcessLostAfter, nodeagent.DefaultLostAfter)
	}
	if cfg, _, err = runUp(t, "--node-lost-after=4s"); err != nil || cfg.API.LostAfter != 4*time.Second {
		t.Errorf("--node-lost-after=4s: %s, %v", cfg.API.LostAfter, err)
	}
}
