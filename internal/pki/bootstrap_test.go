package pki

import (
	"context"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/testwait"
)

// issuer stands in for the API server's NodeIdentity (the layer under
// test is the node's source): it signs for whoever holds the token
// "token-<n>" as node name, after failing the first `unavailable` calls.
type issuer struct {
	ca  *CA
	ttl time.Duration

	mu          sync.Mutex
	unavailable int
	refuse      error
	name        string // the node name it signs for
	tokens      []string
}

func (i *issuer) issue(_ context.Context, der []byte, token string) ([]byte, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.tokens = append(i.tokens, token)
	if i.unavailable > 0 {
		i.unavailable--
		return nil, status.Error(codes.Unavailable, "not yet")
	}
	if i.refuse != nil {
		return nil, i.refuse
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, err
	}
	leaf, err := i.ca.Sign(LeafRequest{Identity: id(auth.ComponentNode, i.name), TTL: i.ttl}, csr.PublicKey)
	if err != nil {
		return nil, err
	}
	return leaf.Raw, nil
}

func (i *issuer) seen() []string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return append([]string(nil), i.tokens...)
}

// bootstrapDir writes a --tls-bootstrap-dir with ca's certificate and
// token.
func bootstrapDir(t *testing.T, ca *CA, token string) string {
	t.Helper()
	dir := t.TempDir()
	for f, b := range map[string][]byte{CAFile: ca.CertPEM, TokenFile: []byte(token + "\n")} {
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestBootstrapSource: the first leaf waits out an issuer that is not
// up yet; each renewal, at two thirds of a leaf's life, asks with the
// token as the file holds it then (the kubelet refreshes it) and a new
// key; a refusal, a leaf for another node or a missing token file ends
// the wait with the reason.
func TestBootstrapSource(t *testing.T) {
	ca := newCA(t)
	t.Run("issued, renewed with the current token", func(t *testing.T) {
		iss := &issuer{ca: ca, ttl: 3 * time.Second, unavailable: 1, name: "pod-a"}
		dir := bootstrapDir(t, ca, "token-1")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		src, err := NewBootstrapSource(ctx, dir, id(auth.ComponentNode, "pod-a"), "", iss.issue, nil)
		if err != nil {
			t.Fatal(err)
		}
		first, err := src.Certificate()
		if err != nil {
			t.Fatal(err)
		}
		if got := src.Roots(); !got.Equal(func() *x509.CertPool { p := x509.NewCertPool(); p.AddCert(ca.Cert); return p }()) {
			t.Error("roots are not the directory's ca.crt")
		}
		if err := os.WriteFile(filepath.Join(dir, TokenFile), []byte("token-2"), 0o600); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { src.Run(ctx); close(done) }()
		testwait.Until(t, "a renewal", func() bool { return src.Issued() >= 2 })
		cancel()
		<-done
		second, err := src.Certificate()
		if err != nil {
			t.Fatal(err)
		}
		if first.Leaf.SerialNumber.Cmp(second.Leaf.SerialNumber) == 0 {
			t.Error("the renewal kept the first leaf")
		}
		if string(first.Leaf.RawSubjectPublicKeyInfo) == string(second.Leaf.RawSubjectPublicKeyInfo) {
			t.Error("the renewal kept the key")
		}
		tokens := iss.seen()
		if len(tokens) < 3 || tokens[0] != "token-1" || tokens[1] != "token-1" || tokens[2] != "token-2" {
			t.Errorf("tokens shown %q: want token-1 (unavailable), token-1, then the refreshed token-2", tokens)
		}
	})
	t.Run("refused", func(t *testing.T) {
		iss := &issuer{ca: ca, ttl: time.Hour, refuse: status.Error(codes.PermissionDenied, "not a worker Pod"), name: "pod-a"}
		_, err := NewBootstrapSource(t.Context(), bootstrapDir(t, ca, "t"), id(auth.ComponentNode, "pod-a"), "", iss.issue, nil)
		if status.Code(errors.Unwrap(err)) != codes.PermissionDenied && status.Code(err) != codes.PermissionDenied {
			t.Errorf("err %v, want the refusal", err)
		}
		if n := len(iss.seen()); n != 1 {
			t.Errorf("asked %d times, want once: a refusal is not retried", n)
		}
	})
	t.Run("another node's leaf", func(t *testing.T) {
		iss := &issuer{ca: ca, ttl: time.Hour, name: "pod-b"}
		_, err := NewBootstrapSource(t.Context(), bootstrapDir(t, ca, "t"), id(auth.ComponentNode, "pod-a"), "", iss.issue, nil)
		if !errors.Is(err, errWrongLeaf) {
			t.Errorf("err %v, want errWrongLeaf", err)
		}
	})
	t.Run("no token file", func(t *testing.T) {
		dir := bootstrapDir(t, ca, "t")
		if err := os.Remove(filepath.Join(dir, TokenFile)); err != nil {
			t.Fatal(err)
		}
		iss := &issuer{ca: ca, ttl: time.Hour, name: "pod-a"}
		if _, err := NewBootstrapSource(t.Context(), dir, id(auth.ComponentNode, "pod-a"), "", iss.issue, nil); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("err %v, want the missing token named, at once", err)
		}
	})
}
