package up

import (
	"path/filepath"
	"strings"
	"testing"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/router"
	"substrate.dev/ate/internal/snapshot"
)

func TestConfigWithDefaults(t *testing.T) {
	dir := t.TempDir()
	got, err := Config{DataDir: dir}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if got.API.Addr != DefaultAPIAddr || got.Router.Addr != DefaultRouterAddr || got.Tunnel.Addr != DefaultTunnelAddr ||
		got.Node.Workers != DefaultWorkers || got.Node.SandboxClass != DefaultSandboxClass || got.Node.Name != DefaultNodeName ||
		got.Demo.Template != DefaultDemoTemplate || got.Router.DrainTimeout != router.DefaultDrainTimeout || got.Logger == nil {
		t.Errorf("defaults not applied: %+v", got)
	}
	// Zero drain delay means none: tests and installations with nothing
	// in front of the router rely on it.
	if got.Router.DrainDelay != 0 {
		t.Errorf("drain delay %s, want 0", got.Router.DrainDelay)
	}
	if !strings.HasPrefix(got.Node.WorkerPrefix, "ate") || len(got.Node.WorkerPrefix) != len("ate")+6 {
		t.Errorf("worker prefix %q", got.Node.WorkerPrefix)
	}
	other, err := Config{DataDir: filepath.Join(dir, "other")}.withDefaults()
	if err != nil || other.Node.WorkerPrefix == got.Node.WorkerPrefix {
		t.Errorf("two data dirs share worker prefix %q (%v)", got.Node.WorkerPrefix, err)
	}
	rel, err := Config{DataDir: "rel"}.withDefaults()
	if err != nil || !filepath.IsAbs(rel.DataDir) {
		t.Errorf("relative data dir became %q, %v", rel.DataDir, err)
	}
	kept, err := Config{DataDir: dir, Node: nodeConfig(2, "p"), Demo: DemoConfig{Enabled: true, Template: "t.yaml",
		LoadTemplate: func(string) (*atev1.ActorTemplate, error) { return nil, nil }}}.withDefaults()
	if err != nil || kept.Node.Workers != 2 || kept.Node.WorkerPrefix != "p" || kept.Demo.Template != "t.yaml" {
		t.Errorf("set fields changed: %+v, %v", kept, err)
	}

	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"negative workers", Config{DataDir: dir, Node: nodeConfig(-1, "")}, "workers: -1 is negative"},
		{"demo without loader", Config{DataDir: dir, Demo: DemoConfig{Enabled: true}}, "demo: no template loader"},
		// Refused before Run writes anything to the data dir.
		{"relative registry credentials", Config{DataDir: dir, RegistryCredentials: "relative-dir"}, "--registry-credentials: registry credentials \"relative-dir\": want anonymous, node or an absolute directory"},
		{"negative volume limit", Config{DataDir: dir, Node: node.Config{VolumeLimits: snapshot.Limits{Bytes: -1}}}, "want 0 (no limit) or more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.cfg.withDefaults(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("withDefaults = %v, want %q", err, tc.want)
			}
		})
	}
}

func nodeConfig(workers int, prefix string) node.Config {
	return node.Config{Workers: workers, WorkerPrefix: prefix}
}

// TestCLIFor: the demo banner's commands work as printed, with the data
// dir ate up was given.
func TestCLIFor(t *testing.T) {
	env := func(home, cfg string) func(string) string {
		return func(k string) string { return map[string]string{"HOME": home, "ATE_CONFIG": cfg}[k] }
	}
	for _, tc := range []struct {
		path string
		env  func(string) string
		want string
	}{
		{"/home/u/.ate/config.yaml", env("/home/u", ""), "bin/ate"},
		{"/srv/ate/config.yaml", env("/home/u", ""), "bin/ate --config /srv/ate/config.yaml"},
		{"/srv/ate/config.yaml", env("/home/u", "/srv/ate/config.yaml"), "bin/ate"},
	} {
		if got := cliFor(tc.path, tc.env); got != tc.want {
			t.Errorf("cliFor(%s) = %q, want %q", tc.path, got, tc.want)
		}
	}
}
