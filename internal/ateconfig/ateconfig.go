// Package ateconfig is the client config file: what `ate up` writes to
// <data-dir>/config.yaml so that the CLI (internal/cli) finds the server.
// Both sides use this package and nothing else of each other.
package ateconfig

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"
	"google.golang.org/grpc/credentials"
	"sigs.k8s.io/yaml"
)

// EnvVar names the environment variable that points at the client config
// file when --config is not given.
const EnvVar = "ATE_CONFIG"

// Config is the client config file, e.g. $HOME/.ate/config.yaml:
//
//	server: 127.0.0.1:7070
//	token: <bearer token>
//
// New settings (a bearer token, a CA bundle) become new fields here;
// unknown keys are ignored on Load so an older client still reads a file
// written by a newer `ate up`.
type Config struct {
	// Server is the API server's gRPC address: host:port, a comma-separated
	// list of replicas, dns:///name:port or k8s:///service.namespace:port
	// (internal/apidial).
	Server string `json:"server"`
	// CertificateAuthority is the path of the PEM CA bundle the API
	// server's certificate must chain to (`ate up` writes
	// <data-dir>/pki/ca.crt); empty means plaintext (an API server run
	// with --insecure). A relative path is relative to the config file.
	CertificateAuthority string `json:"certificate-authority,omitempty"`
	// Token is the bearer token sent with every call (the admin token
	// `ate up` writes, a static token, an OIDC ID token; docs/security.md).
	// Empty: none.
	Token string `json:"token,omitempty"`
}

// BearerToken is a bearer token as gRPC per-RPC credentials: metadata
// "authorization: Bearer <token>" on every call.
type BearerToken struct {
	Token string
	// AllowPlaintext sends it over a connection without TLS too; else
	// gRPC refuses such a call rather than leak the token.
	AllowPlaintext bool
}

var _ credentials.PerRPCCredentials = BearerToken{}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b BearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.Token}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (b BearerToken) RequireTransportSecurity() bool { return !b.AllowPlaintext }

// Path resolves the client config file: flagValue (the CLI's --config
// flag) if set, else $ATE_CONFIG, else $HOME/.ate/config.yaml. getenv is
// os.Getenv outside tests.
func Path(flagValue string, getenv func(string) string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if p := getenv(EnvVar); p != "" {
		return p, nil
	}
	home := getenv("HOME")
	if home == "" {
		var err error
		if home, err = os.UserHomeDir(); err != nil {
			return "", fmt.Errorf("find the config file: set --config or $%s: %w", EnvVar, err)
		}
	}
	return filepath.Join(home, ".ate", "config.yaml"), nil
}

// Load reads the config file at path. A missing file yields an error
// wrapping fs.ErrNotExist, so callers can tell "not set up yet" apart from
// a broken file.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	var c Config
	if err := yaml.Unmarshal(data, &c); err != nil {
		return Config{}, fmt.Errorf("parse config %s: %w", path, err)
	}
	if c.CertificateAuthority != "" && !filepath.IsAbs(c.CertificateAuthority) {
		c.CertificateAuthority = filepath.Join(filepath.Dir(path), c.CertificateAuthority)
	}
	return c, nil
}

// Write writes c to path with mode 0600, creating the directory (0700) if
// needed. The file will hold credentials later, hence the modes. It writes
// a temporary file and renames it so a concurrent reader never sees half a
// file.
func Write(path string, c Config) error {
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
