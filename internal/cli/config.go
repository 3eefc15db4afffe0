package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"
	"sigs.k8s.io/yaml"
)

// EnvConfig names the environment variable that points at the client config
// file when --config is not given.
const EnvConfig = "ATE_CONFIG"

// Config is the client config file, e.g. $HOME/.ate/config.yaml:
//
//	server: 127.0.0.1:7070
//
// `ate up` writes it so later commands find the server. New settings (a
// bearer token, a CA bundle) become new fields here; unknown keys are ignored
// on load so an older client still reads a file written by a newer `ate up`.
type Config struct {
	// Server is the API server's gRPC address, host:port.
	Server string `json:"server"`
}

// ConfigPath resolves the client config file: flagValue (the --config flag)
// if set, else $ATE_CONFIG, else $HOME/.ate/config.yaml. getenv is os.Getenv
// outside tests.
func ConfigPath(flagValue string, getenv func(string) string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if p := getenv(EnvConfig); p != "" {
		return p, nil
	}
	home := getenv("HOME")
	if home == "" {
		var err error
		if home, err = os.UserHomeDir(); err != nil {
			return "", fmt.Errorf("find the config file: set --config or $%s: %w", EnvConfig, err)
		}
	}
	return filepath.Join(home, ".ate", "config.yaml"), nil
}

// LoadConfig reads the config file at path. A missing file yields an error
// wrapping fs.ErrNotExist, so callers can tell "not set up yet" apart from a
// broken file.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	var c Config
	if err := yaml.Unmarshal(data, &c); err != nil {
		return Config{}, fmt.Errorf("parse config %s: %w", path, err)
	}
	return c, nil
}

// WriteConfig writes c to path with mode 0600, creating the directory (0700)
// if needed. The file will hold credentials later, hence the modes. It writes
// a temporary file and renames it so a concurrent reader never sees half a
// file.
func WriteConfig(path string, c Config) error {
	data, err := yaml.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode config: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create config directory: %w", err)
	}
	if err := replaceFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write config %s: %w", path, err)
	}
	return nil
}

// replaceFile writes data to a temporary file, syncs it and renames it
// over path (renameio), so a reader never sees half a file, and leaves it
// with mode perm whatever mode a file already there had: the config must
// stay 0600 as it will hold credentials, and renameio.WriteFile would keep
// an existing file's mode.
func replaceFile(path string, data []byte, perm fs.FileMode) error {
	f, err := renameio.NewPendingFile(path, renameio.WithPermissions(perm))
	if err != nil {
		return err
	}
	defer f.Cleanup()
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.CloseAtomicallyReplace()
}

// clientConfig finds the server address from --server and the config file.
// --server alone is enough; the file is still read when present so that
// future settings (tokens) apply to an overridden address too.
func (a *app) clientConfig() (Config, error) {
	path, err := ConfigPath(a.configFlag, a.getenv)
	if err != nil {
		return Config{}, err
	}
	c, err := LoadConfig(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && a.server != "":
		c = Config{}
	case errors.Is(err, fs.ErrNotExist):
		return Config{}, fmt.Errorf("no client config at %s: run `ate up` to start a local server (it writes this file) or pass --server HOST:PORT", path)
	case err != nil:
		return Config{}, err
	}
	if a.server != "" {
		c.Server = a.server
	}
	if c.Server == "" {
		return Config{}, fmt.Errorf("client config %s sets no server: run `ate up` or pass --server HOST:PORT", path)
	}
	return c, nil
}
