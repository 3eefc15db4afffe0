package cli

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConfigPath(t *testing.T) {
	for _, tc := range []struct {
		name string
		flag string
		env  map[string]string
		want string
	}{
		{"flag wins", "/f.yaml", map[string]string{"ATE_CONFIG": "/e.yaml", "HOME": "/h"}, "/f.yaml"},
		{"env", "", map[string]string{"ATE_CONFIG": "/e.yaml", "HOME": "/h"}, "/e.yaml"},
		{"home", "", map[string]string{"HOME": "/h"}, "/h/.ate/config.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ConfigPath(tc.flag, func(k string) string { return tc.env[k] })
			if err != nil || got != tc.want {
				t.Errorf("ConfigPath = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestWriteLoadConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nested", ".ate", "config.yaml")
	want := Config{Server: "127.0.0.1:7070"}
	if err := WriteConfig(path, want); err != nil {
		t.Fatal(err)
	}
	checkMode(t, path, 0o600)
	checkMode(t, filepath.Dir(path), 0o700)
	data, err := os.ReadFile(path)
	if err != nil || string(data) != "server: 127.0.0.1:7070\n" {
		t.Errorf("file = %q, %v", data, err)
	}
	got, err := LoadConfig(path)
	if err != nil || got != want {
		t.Errorf("LoadConfig = %+v, %v; want %+v", got, err, want)
	}

	// Overwrite makes it 0600 again, even if someone loosened it, and
	// leaves no temporary files behind.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteConfig(path, Config{Server: "10.0.0.1:7070"}); err != nil {
		t.Fatal(err)
	}
	checkMode(t, path, 0o600)
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil || len(entries) != 1 {
		t.Errorf("directory holds %v, %v; want only config.yaml", entries, err)
	}
}

func checkMode(t *testing.T, path string, want fs.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s mode %v, want %v", path, got, want)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadConfig(filepath.Join(dir, "missing.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "server: [unclosed\n")
	if _, err := LoadConfig(bad); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("malformed file: %v", err)
	}
	// Keys a newer `ate up` may add must not break this client.
	future := filepath.Join(dir, "future.yaml")
	writeFile(t, future, "server: h:1\ntoken: abc\n")
	if c, err := LoadConfig(future); err != nil || c.Server != "h:1" {
		t.Errorf("future file: %+v, %v", c, err)
	}
}

// TestServerAddress checks how the CLI finds the server: --server, the config
// file named by --config or $ATE_CONFIG, and the error when neither exists.
func TestServerAddress(t *testing.T) {
	addr := serve(t, newFake())
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := WriteConfig(good, Config{Server: addr}); err != nil {
		t.Fatal(err)
	}
	wrong := filepath.Join(dir, "wrong.yaml")
	if err := WriteConfig(wrong, Config{Server: closedAddr(t)}); err != nil {
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
		{"missing config", nil, []string{"--config", missing}, "run `ate up` to start a local server (it writes this file) or pass --server HOST:PORT"},
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
