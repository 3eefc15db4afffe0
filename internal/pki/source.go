package pki

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Source hands out a component's current credentials: the leaf it
// presents and the CAs it trusts. tls.Configs built on a Source
// (ServerConfig, ClientConfig) ask it on every handshake, so a rotated
// leaf is used by new connections while established ones carry on.
type Source interface {
	// Certificate is the leaf to present now.
	Certificate() (*tls.Certificate, error)
	// Roots are the CAs peers' certificates must chain to.
	Roots() *x509.CertPool
}

// PollInterval is how often a FileSource looks for changed files.
const PollInterval = 2 * time.Second

// FileSource reads a --tls-dir (ca.crt, tls.crt, tls.key) and reads it
// again when the files change (mtime, size or contents), as cert-manager
// or a kubelet's Secret volume replace them: a new pair is used for new
// handshakes once it parses and matches; until then the previous one
// stays.
type FileSource struct {
	dir string
	log *slog.Logger

	mu    sync.Mutex
	cert  *tls.Certificate
	roots *x509.CertPool
	seen  []byte // the files' contents last loaded
}

// NewFileSource loads dir and keeps re-reading it every PollInterval
// until ctx ends. Errors: a missing or unreadable file, a pair that does
// not match, a ca.crt without certificates.
func NewFileSource(ctx context.Context, dir string, log *slog.Logger) (*FileSource, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &FileSource{dir: dir, log: log}
	if _, err := s.reload(); err != nil {
		return nil, err
	}
	go func() {
		t := time.NewTicker(PollInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				changed, err := s.reload()
				switch {
				case err != nil:
					s.log.Warn("TLS files changed but cannot be used yet; keeping the previous certificate", "dir", dir, "err", err)
				case changed:
					c, _ := s.Certificate()
					s.log.Info("TLS certificate reloaded", "dir", dir, "serial", c.Leaf.SerialNumber.Text(16), "notAfter", c.Leaf.NotAfter)
				}
			}
		}
	}()
	return s, nil
}

// reload reads the three files and, if their contents differ from the
// last loaded, parses and installs them.
func (s *FileSource) reload() (bool, error) {
	var files [3][]byte
	for i, name := range []string{CAFile, CertFile, KeyFile} {
		b, err := os.ReadFile(filepath.Join(s.dir, name))
		if err != nil {
			return false, fmt.Errorf("--tls-dir: %w", err)
		}
		files[i] = b
	}
	all := bytes.Join(files[:], []byte{0})
	s.mu.Lock()
	same := bytes.Equal(all, s.seen)
	s.mu.Unlock()
	if same {
		return false, nil
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(files[0]) {
		return false, fmt.Errorf("--tls-dir: %s holds no PEM certificate", filepath.Join(s.dir, CAFile))
	}
	pair, err := tls.X509KeyPair(files[1], files[2])
	if err != nil {
		return false, fmt.Errorf("--tls-dir %s: %s and %s: %w", s.dir, CertFile, KeyFile, err)
	}
	s.mu.Lock()
	s.cert, s.roots, s.seen = &pair, roots, all
	s.mu.Unlock()
	return true, nil
}

// Certificate implements Source.
func (s *FileSource) Certificate() (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cert, nil
}

// Roots implements Source.
func (s *FileSource) Roots() *x509.CertPool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.roots
}

// MemorySource is a leaf issued in memory by a CA the process holds
// (`ate up`), renewed when two thirds of its life have passed: by Run
// at that time, or by the first handshake after it if Run is late.
type MemorySource struct {
	ca    *CA
	req   LeafRequest
	roots *x509.CertPool

	mu      sync.Mutex
	cert    *tls.Certificate
	renewAt time.Time
	issued  int
	onRenew func(*x509.Certificate)
}

// NewMemorySource issues req's first leaf from ca. Errors: Issue's.
func NewMemorySource(ca *CA, req LeafRequest) (*MemorySource, error) {
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	s := &MemorySource{ca: ca, req: req, roots: roots}
	if err := s.renew(); err != nil {
		return nil, err
	}
	return s, nil
}

// OnRenew makes f be called with every leaf issued from now on (logs,
// tests counting rotations).
func (s *MemorySource) OnRenew(f func(*x509.Certificate)) {
	s.mu.Lock()
	s.onRenew = f
	s.mu.Unlock()
}

// renew issues a new leaf; s.mu is held or s is not shared yet.
func (s *MemorySource) renew() error {
	now := time.Now()
	c, _, _, err := s.ca.Issue(s.req)
	if err != nil {
		return err
	}
	// From the times asked for, not the certificate's, which are whole
	// seconds (a leaf of a few seconds, in tests, would be off by half).
	ttl := s.req.TTL
	if ttl <= 0 {
		ttl = DefaultLeafTTL
	}
	s.cert, s.renewAt = c, now.Add(ttl*2/3)
	if c.Leaf.NotAfter.Before(s.renewAt) {
		s.renewAt = now.Add(c.Leaf.NotAfter.Sub(now) * 2 / 3)
	}
	s.issued++
	if s.onRenew != nil {
		s.onRenew(c.Leaf)
	}
	return nil
}

// Certificate implements Source: the current leaf, renewed first if two
// thirds of its life are over. A failed renewal keeps the current leaf
// while it is valid.
func (s *MemorySource) Certificate() (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Now().After(s.renewAt) {
		if err := s.renew(); err != nil && time.Now().After(s.cert.Leaf.NotAfter) {
			return nil, errors.Join(errors.New("renew certificate"), err)
		}
	}
	return s.cert, nil
}

// Run renews s's leaf at two thirds of its life until ctx ends, so a
// leaf is fresh before anyone asks (and renewals show in the logs, via
// OnRenew, whether or not a connection was made).
func (s *MemorySource) Run(ctx context.Context) {
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
			_, _ = s.Certificate() // renews; a failure is retried by the next handshake
		}
	}
}

// Roots implements Source: the CA.
func (s *MemorySource) Roots() *x509.CertPool { return s.roots }

// Issued is how many leaves s has issued, the first included.
func (s *MemorySource) Issued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.issued
}
