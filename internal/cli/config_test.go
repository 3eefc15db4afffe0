package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"substrate.dev/ate/internal/ateconfig"
)

// TestServerAddress checks how the CLI finds the server: --server, the config
// file named by --config or $ATE_CONFIG, and the error when neither exists.
func TestServerAddress(t *testing.T) {
	addr := serve(t, newFake())
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := ateconfig.Write(good, ateconfig.Config{Server: addr}); err != nil {
		t.Fatal(err)
	}
	wrong := filepath.Join(dir, "wrong.yaml")
	if err := ateconfig.Write(wrong, ateconfig.Config{Server: closedAddr(t)}); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.yaml")
	writeFile(t, empty, "{}\n")
	missing := filepath.Join(dir, "missing.yaml")

	for _, tc := range []struct {
		name    string
		env     map[string]string
		args    []string
		wantErr string // substring of stderr; empty means success
	}{
		{"config flag", nil, []string{"--config", good}, ""},
		{"ATE_CONFIG", map[string]string{"ATE_CONFIG": good}, nil, ""},
		{"HOME", map[string]string{"HOME": dir}, nil, "no client config at " + filepath.Join(dir, ".ate", "config.yaml")},
		{"server overrides config", nil, []string{"--config", wrong, "--server", addr}, ""},
		{"server without config", nil, []string{"--config", missing, "--server", addr}, ""},
		{"missing config", nil, []string{"--config", missing}, "run `ate up` to start a local server (it writes this file; with --data-dir DIR it writes DIR/config.yaml: pass --config DIR/config.yaml or set $ATE_CONFIG), or pass --server HOST:PORT"},
		{"config without server", nil, []string{"--config", empty}, "sets no server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := NewRootCommand(WithGetenv(func(k string) string { return tc.env[k] }), WithNow(func() time.Time { return testNow }))
			var stdout, stderr bytes.Buffer
			root.SetOut(&stdout)
			root.SetErr(&stderr)
			root.SetArgs(append(tc.args, "get", "workers"))
			code := Main(t.Context(), root)
			if tc.wantErr == "" {
				if code != 0 || !strings.Contains(stdout.String(), "w-0") {
					t.Errorf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
				}
				return
			}
			if code == 0 || !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("exit %d, stderr %q, want it to contain %q", code, stderr.String(), tc.wantErr)
			}
		})
	}
}
