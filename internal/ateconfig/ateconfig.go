// Package ateconfig is the client config file: what `ate up` writes to
// <data-dir>/config.yaml so that the CLI (internal/cli) finds the server,
// and the named contexts a user adds for other installations (File).
// Both sides use this package and nothing else of each other.
package ateconfig

import (
	"context"
	"errors"
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

// Config is one set of connection settings: the client config file's
// top-level fields, e.g. in $HOME/.ate/config.yaml,
//
//	server: 127.0.0.1:7070
//	certificate-authority: pki/ca.crt
//	token: <bearer token>
//
// or one of its named contexts (File). New settings become new fields
// here; unknown keys are ignored on Load so an older client still reads a
// file written by a newer `ate up`.
type Config struct {
	// Server is the API server's gRPC address: host:port, a comma-separated
	// list of replicas, dns:///name:port or k8s:///service.namespace:port
	// (internal/apidial). Empty in a context used in Kubernetes mode: the
	// CLI finds the server through the cluster.
	Server string `json:"server,omitempty"`
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

// Load reads the config file at path and returns the settings it selects
// when the caller names no context (File.Select("")): its
// current-context's, else its top-level fields. A missing file yields an
// error wrapping fs.ErrNotExist, so callers can tell "not set up yet"
// apart from a broken file.
func Load(path string) (Config, error) {
	f, err := LoadFile(path)
	if err != nil {
		return Config{}, err
	}
	c, _, err := f.Select("")
	return c, err
}

// Write makes c the top-level settings of the file at path and the ones
// used by default (it clears current-context), keeping the file's named
// contexts; it creates the file if there is none. `ate up` writes its
// server this way: the CLI then talks to the server just started, as
// `kind create cluster` switches kubectl to the new cluster, and the
// contexts a user added (`ate config set-context`) survive a restart.
// A file that is there but does not parse is an error, not overwritten:
// those contexts would be lost. The file is written as WriteFile does.
func Write(path string, c Config) error {
	f, err := LoadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f = &File{}
	case err != nil:
		return fmt.Errorf("%w (fix or remove the file)", err)
	}
	f.Config = c
	f.CurrentContext = ""
	return WriteFile(path, f)
}

// WriteFile writes f to path with mode 0600, creating the directory
// (0700) if needed: the file holds bearer tokens. It writes a temporary
// file and renames it so a concurrent reader never sees half a file.
// Two writers at once (`ate up` starting while `ate config` edits)
// each write a whole file; the later one wins.
func WriteFile(path string, f *File) error {
	data, err := yaml.Marshal(f)
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
