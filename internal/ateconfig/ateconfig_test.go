package ateconfig

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPath(t *testing.T) {
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
			got, err := Path(tc.flag, func(k string) string { return tc.env[k] })
			if err != nil || got != tc.want {
				t.Errorf("Path = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestWriteLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nested", ".ate", "config.yaml")
	want := Config{Server: "127.0.0.1:7070"}
	if err := Write(path, want); err != nil {
		t.Fatal(err)
	}
	checkMode(t, path, 0o600)
	checkMode(t, filepath.Dir(path), 0o700)
	data, err := os.ReadFile(path)
	if err != nil || string(data) != "server: 127.0.0.1:7070\n" {
		t.Errorf("file = %q, %v", data, err)
	}
	got, err := Load(path)
	if err != nil || got != want {
		t.Errorf("Load = %+v, %v; want %+v", got, err, want)
	}

	// Overwrite makes it 0600 again, even if someone loosened it, and
	// leaves no temporary files behind.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, Config{Server: "10.0.0.1:7070"}); err != nil {
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

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "server: [unclosed\n")
	if _, err := Load(bad); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("malformed file: %v", err)
	}
	// Keys a newer `ate up` may add must not break this client.
	future := filepath.Join(dir, "future.yaml")
	writeFile(t, future, "server: h:1\ntoken: abc\n")
	if c, err := Load(future); err != nil || c.Server != "h:1" {
		t.Errorf("future file: %+v, %v", c, err)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestToken: the token survives Write and Load, and BearerToken sends it
// as "authorization: Bearer …", over plaintext only when allowed.
func TestToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := Write(path, Config{Server: "127.0.0.1:1", Token: "s3cret"}); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil || c.Token != "s3cret" {
		t.Fatalf("Load = %+v, %v; want the token back", c, err)
	}
	opts, err := DialOptions(c)
	// The transport's credentials (here plaintext: no CA), and the token.
	if err != nil || len(opts) != 2 {
		t.Fatalf("DialOptions = %d options, %v; want the transport's and the per-RPC token", len(opts), err)
	}
	if opts, _ := DialOptions(Config{Server: "x"}); len(opts) != 1 {
		t.Errorf("DialOptions without a token = %d options, want the transport's only", len(opts))
	}
	md, err := BearerToken{Token: "s3cret"}.GetRequestMetadata(context.Background())
	if err != nil || md["authorization"] != "Bearer s3cret" {
		t.Errorf("metadata %v, %v", md, err)
	}
	if (BearerToken{}).RequireTransportSecurity() != true || (BearerToken{AllowPlaintext: true}).RequireTransportSecurity() {
		t.Error("RequireTransportSecurity must be true unless plaintext is allowed")
	}
}

// TestPlaintextTokenOnlyToLoopback: a token goes without TLS only to a
// server on this machine; to any other (an address on the network, a
// list with one such replica, a Kubernetes Service) dialling is refused
// before a connection exists, so nothing on the path sees the token.
// With a CA, or without a token, every server is dialled.
func TestPlaintextTokenOnlyToLoopback(t *testing.T) {
	ca := writeTestCA(t)
	for _, c := range []struct {
		server   string
		loopback bool
	}{
		{"127.0.0.1:7070", true},
		{"localhost:7070", true},
		{"[::1]:7070", true},
		{"127.0.0.1:7070,127.0.0.2:7071", true},
		{"dns:///localhost:7070", true},
		{"10.0.0.7:7070", false},
		{"api.example.com:7070", false},
		{"127.0.0.1:7070,10.0.0.7:7070", false},
		{"0.0.0.0:7070", false},
		{"dns:///api.example.com:7070", false},
		{"k8s:///ate-apiserver.ate-system:grpc", false},
		{"", false},
	} {
		t.Run(c.server, func(t *testing.T) {
			_, err := DialOptions(Config{Server: c.server, Token: "s3cret"})
			if c.loopback && err != nil {
				t.Fatalf("plaintext token to %q: %v, want allowed", c.server, err)
			}
			if !c.loopback && !errors.Is(err, ErrPlaintextToken) {
				t.Fatalf("plaintext token to %q: %v, want ErrPlaintextToken", c.server, err)
			}
			if err != nil && strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("error shows the token: %v", err)
			}
			if _, err := DialOptions(Config{Server: c.server}); err != nil {
				t.Errorf("no token, plaintext: %v", err)
			}
			if _, err := DialOptions(Config{Server: c.server, Token: "s3cret", CertificateAuthority: ca}); err != nil {
				t.Errorf("token over TLS: %v", err)
			}
		})
	}
}

// writeTestCA writes a self-signed CA certificate and returns its path.
func writeTestCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
