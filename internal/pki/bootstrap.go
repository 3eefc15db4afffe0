package pki

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"substrate.dev/ate/internal/auth"
)

// TokenFile is the ServiceAccount token's file in a --tls-bootstrap-dir
// (beside CAFile): the path of the worker Pod's projected volume.
const TokenFile = "token"

// IssueFunc asks the issuer (the API server's NodeIdentity service) to
// sign a certificate request (DER) for the holder of token; it returns
// the leaf (DER).
type IssueFunc func(ctx context.Context, csr []byte, token string) ([]byte, error)

// BootstrapSource is a node's leaf obtained with its Pod's
// ServiceAccount token instead of read from files (--tls-bootstrap-dir):
// a fresh key for every leaf, sent as a certificate request with the
// token as it is in the directory then (the kubelet refreshes it), and
// renewed when two thirds of the leaf's life have passed. The roots are
// the directory's ca.crt, read again at every renewal.
type BootstrapSource struct {
	dir         string
	node        auth.Identity
	trustDomain string
	issue       IssueFunc
	log         *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	roots   *x509.CertPool
	renewAt time.Time
	issued  int
}

// bootstrapRetry bounds the wait between two failed attempts.
const bootstrapRetry = 30 * time.Second

// NewBootstrapSource obtains node's first leaf through issue, retrying
// what may pass (the API server not up yet, the cluster unreachable)
// until ctx ends. Errors: a file of dir missing, a refusal
// (Unauthenticated, PermissionDenied, InvalidArgument: retrying would not
// change it), a leaf that is not node's.
func NewBootstrapSource(ctx context.Context, dir string, node auth.Identity, trustDomain string, issue IssueFunc, log *slog.Logger) (*BootstrapSource, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &BootstrapSource{dir: dir, node: node, trustDomain: trustDomain, issue: issue, log: log}
	if err := s.readRoots(); err != nil {
		return nil, err
	}
	for wait := time.Second; ; wait = min(2*wait, bootstrapRetry) {
		err := s.renew(ctx)
		if err == nil {
			return s, nil
		}
		if refused(err) {
			return nil, err
		}
		log.Warn("node certificate: not issued yet, retrying", "in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// refused reports whether err is the issuer's refusal, which a retry
// with the same token would meet again.
func refused(err error) bool {
	switch status.Code(err) {
	case codes.Unauthenticated, codes.PermissionDenied, codes.InvalidArgument:
		return true
	}
	// A file missing from the directory is a mount that is not there:
	// waiting would not bring it.
	return errors.Is(err, errWrongLeaf) || errors.Is(err, fs.ErrNotExist)
}

var errWrongLeaf = errors.New("the issuer signed another certificate than the one asked for")

// readCAFile reads dir's ca.crt into a pool. Errors: the file's, or one
// without a PEM certificate.
func readCAFile(dir string) (*x509.CertPool, error) {
	path := filepath.Join(dir, CAFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--tls-bootstrap-dir: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("--tls-bootstrap-dir: %s holds no PEM certificate", path)
	}
	return roots, nil
}

// readRoots reads dir's ca.crt.
func (s *BootstrapSource) readRoots() error {
	roots, err := readCAFile(s.dir)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.roots = roots
	s.mu.Unlock()
	return nil
}

// renew asks for a new leaf and installs it.
func (s *BootstrapSource) renew(ctx context.Context) error {
	if err := s.readRoots(); err != nil {
		return err
	}
	token, err := os.ReadFile(filepath.Join(s.dir, TokenFile))
	if err != nil {
		return fmt.Errorf("--tls-bootstrap-dir: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate key: %w", err)
	}
	// The subject is what we expect; the issuer names the Pod whatever
	// we write, and we check below that it did.
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: s.node.String()}}, key)
	if err != nil {
		return fmt.Errorf("certificate request: %w", err)
	}
	now := time.Now()
	der, err := s.issue(ctx, csr, string(bytes.TrimSpace(token)))
	if err != nil {
		return fmt.Errorf("node certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return fmt.Errorf("node certificate: %w", err)
	}
	id, err := identityOf(leaf, s.trustDomain)
	if err != nil || id != s.node {
		return fmt.Errorf("%w: %s for node %s (is --name the Pod's name?)", errWrongLeaf, leaf.Subject.CommonName, s.node.Name)
	}
	if pub, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return fmt.Errorf("%w: its key is not ours", errWrongLeaf)
	}
	s.mu.Lock()
	s.cert = &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	s.renewAt = now.Add(leaf.NotAfter.Sub(now) * 2 / 3)
	s.issued++
	s.mu.Unlock()
	s.log.Info("node certificate issued", "node", s.node.Name, "notAfter", leaf.NotAfter)
	return nil
}

// Run renews the leaf at two thirds of its life until ctx ends. A failed
// renewal is retried (the current leaf serves while it is valid, and the
// log says why each attempt failed).
func (s *BootstrapSource) Run(ctx context.Context) {
	retry := time.Second
	for {
		s.mu.Lock()
		wait := time.Until(s.renewAt)
		s.mu.Unlock()
		t := time.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if err := s.renew(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Error("node certificate: renewal failed, retrying", "in", retry, "err", err)
			s.mu.Lock()
			s.renewAt = time.Now().Add(retry)
			s.mu.Unlock()
			retry = min(2*retry, bootstrapRetry)
			continue
		}
		retry = time.Second
	}
}

// Certificate implements Source: the current leaf; an error once it has
// expired (a renewal failed for all of its last third).
func (s *BootstrapSource) Certificate() (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Now().After(s.cert.Leaf.NotAfter) {
		return nil, fmt.Errorf("node certificate expired at %s and could not be renewed (see the log)", s.cert.Leaf.NotAfter)
	}
	return s.cert, nil
}

// Roots implements Source.
func (s *BootstrapSource) Roots() *x509.CertPool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.roots
}

// Issued is how many leaves s has obtained, the first included.
func (s *BootstrapSource) Issued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.issued
}

// BootstrapClientConfig is the TLS config a node dials the issuer with
// before (and while) it has a leaf: no client certificate, the server
// verified as an API server of trustDomain against dir's ca.crt, read at
// every handshake (there is one an hour).
func BootstrapClientConfig(dir, trustDomain string) *tls.Config {
	return ClientConfig(dirRoots(dir), trustDomain, auth.ComponentAPIServer)
}

// dirRoots is a Source with no leaf whose roots are a directory's
// ca.crt (none if it cannot be read: the handshake then fails, and the
// caller's log says why the file is missing).
type dirRoots string

func (d dirRoots) Certificate() (*tls.Certificate, error) { return nil, nil }
func (d dirRoots) Roots() *x509.CertPool {
	roots, err := readCAFile(string(d))
	if err != nil {
		return x509.NewCertPool()
	}
	return roots
}

// LoadBootstrap is Load for a node with BootstrapDir: its Transport's
// leaf comes from a BootstrapSource asking issue (NewBootstrapSource),
// renewed by the source's Run, which the caller starts. Errors:
// NewBootstrapSource's, BootstrapDir with Dir or Insecure.
func (s Settings) LoadBootstrap(ctx context.Context, node string, issue IssueFunc, log *slog.Logger) (*Transport, *BootstrapSource, error) {
	if s.Dir != "" || s.Insecure {
		return nil, nil, errors.New("--tls-bootstrap-dir excludes --tls-dir and --insecure: pass one")
	}
	td := s.TrustDomain
	if td == "" {
		td = auth.DefaultTrustDomain
	}
	src, err := NewBootstrapSource(ctx, s.BootstrapDir, auth.Identity{Component: auth.ComponentNode, Name: node}, td, issue, log)
	if err != nil {
		return nil, nil, err
	}
	return &Transport{Source: src, TrustDomain: td}, src, nil
}
