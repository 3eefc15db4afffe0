// Package pki is the mutual TLS between Substrate's components: a CA
// (ECDSA P-256, crypto/x509), short-lived leaf certificates whose URI SAN
// is the component's SPIFFE ID (auth.Identity.URI), credential sources
// that always hand out the current leaf (files re-read when they change,
// or leaves issued and renewed in memory by `ate up`), the tls.Configs
// built on them, and the peer's identity on the other side
// (docs/security.md, "mTLS between components").
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/google/renameio/v2"

	"substrate.dev/ate/internal/auth"
)

// File names: a CA directory holds CAFile and CAKeyFile (`ate certs
// init`); a TLS directory (--tls-dir) holds CAFile, CertFile and KeyFile,
// the kubernetes.io/tls Secret layout plus cert-manager's ca.crt.
const (
	CAFile    = "ca.crt"
	CAKeyFile = "ca.key"
	CertFile  = "tls.crt"
	KeyFile   = "tls.key"
)

// Defaults: a CA lives ten years; a leaf DefaultLeafTTL, renewed by an
// in-process source at two thirds of its life.
const (
	DefaultCATTL   = 10 * 365 * 24 * time.Hour
	DefaultLeafTTL = 24 * time.Hour
	// clockSkew backdates NotBefore so a peer whose clock is a little
	// behind ours accepts a leaf issued just now.
	clockSkew = 5 * time.Minute
)

// CA is a certificate authority: its self-signed certificate and key.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// CertPEM is Cert PEM-encoded, what ca.crt holds.
	CertPEM []byte
}

// NewCA makes a CA named "ate CA <trustDomain>" valid for ttl (0:
// DefaultCATTL).
func NewCA(trustDomain string, ttl time.Duration) (*CA, error) {
	if ttl <= 0 {
		ttl = DefaultCATTL
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: "ate CA " + trustDomain, Organization: []string{"Substrate"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(ttl),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// LoadCA reads dir/ca.crt and dir/ca.key (PEM; the key SEC 1 or PKCS #8
// ECDSA). Errors wrap fs.ErrNotExist when either is missing.
func LoadCA(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CAFile))
	if err != nil {
		return nil, fmt.Errorf("read CA: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, fmt.Errorf("read CA key: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA in %s: %w", dir, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("CA in %s: the key is %T, want ECDSA", dir, pair.PrivateKey)
	}
	if !pair.Leaf.IsCA {
		return nil, fmt.Errorf("CA in %s: %s is not a CA certificate", dir, CAFile)
	}
	// Only the first certificate: a bundle (old and new CA) is for
	// trusting, the first one signs.
	block, _ := pem.Decode(certPEM)
	return &CA{Cert: pair.Leaf, Key: key, CertPEM: pem.EncodeToMemory(block)}, nil
}

// InitCA returns the CA in dir, creating it (dir 0700, ca.key 0600,
// ca.crt 0644) when there is none; created reports which. A directory
// with only one of the two files is an error, not overwritten.
func InitCA(dir, trustDomain string) (ca *CA, created bool, err error) {
	ca, err = LoadCA(dir)
	if err == nil {
		return ca, false, nil
	}
	_, certErr := os.Stat(filepath.Join(dir, CAFile))
	_, keyErr := os.Stat(filepath.Join(dir, CAKeyFile))
	if !errors.Is(certErr, fs.ErrNotExist) || !errors.Is(keyErr, fs.ErrNotExist) {
		return nil, false, err
	}
	if ca, err = NewCA(trustDomain, 0); err != nil {
		return nil, false, err
	}
	keyPEM, err := encodeKey(ca.Key)
	if err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("CA directory: %w", err)
	}
	// The key first: a crash between the two leaves no ca.crt, and the
	// next start sees "only one file" rather than a CA without its key.
	if err := writeFile(filepath.Join(dir, CAKeyFile), keyPEM, 0o600); err != nil {
		return nil, false, err
	}
	if err := writeFile(filepath.Join(dir, CAFile), ca.CertPEM, 0o644); err != nil {
		return nil, false, err
	}
	return ca, true, nil
}

// LeafRequest describes a leaf certificate to issue.
type LeafRequest struct {
	// Identity becomes the URI SAN, Identity.URI(TrustDomain) (default
	// auth.DefaultTrustDomain), and the common name.
	Identity    auth.Identity
	TrustDomain string
	// DNS and IPs are extra SANs: the names and addresses peers dial this
	// component at, for tools that check host names (curl, grpcurl).
	DNS []string
	IPs []net.IP
	// TTL is the leaf's life; 0 means DefaultLeafTTL. It never outlives
	// the CA.
	TTL time.Duration
}

// Issue signs a new leaf for req with a fresh P-256 key, usable as both
// server and client certificate. It returns the leaf as a tls.Certificate
// (Leaf set; the chain is the leaf alone, peers hold the CA) and its
// PEM encodings. Errors: an invalid identity.
func (ca *CA) Issue(req LeafRequest) (*tls.Certificate, []byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("generate key: %w", err)
	}
	leaf, err := ca.Sign(req, &key.PublicKey)
	if err != nil {
		return nil, nil, nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw})
	return &tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}, certPEM, keyPEM, nil
}

// Sign signs a leaf for req over pub, a key the requester holds (a
// node's certificate request, NodeIdentity): as Issue, without making
// the key. Errors: an invalid identity.
func (ca *CA) Sign(req LeafRequest, pub crypto.PublicKey) (*x509.Certificate, error) {
	if !req.Identity.Component.Valid() || req.Identity.Name == "" {
		return nil, fmt.Errorf("issue certificate: invalid identity %q (want a component of apiserver, node, router, controller and a name)", req.Identity)
	}
	td := req.TrustDomain
	if td == "" {
		td = auth.DefaultTrustDomain
	}
	ttl := req.TTL
	if ttl <= 0 {
		ttl = DefaultLeafTTL
	}
	now := time.Now()
	notBefore := now.Add(-clockSkew)
	if ttl < clockSkew {
		// Very short test leaves: a backdate longer than the life would
		// make "2/3 of the life" already past.
		notBefore = now.Add(-ttl / 10)
	}
	notAfter := now.Add(ttl)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: req.Identity.String(), Organization: []string{"Substrate"}},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{req.Identity.URI(td)},
		DNSNames:     req.DNS,
		IPAddresses:  req.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate: %w", err)
	}
	return x509.ParseCertificate(der)
}

// IssueToDir issues req's leaf and writes a --tls-dir: out/ca.crt (the
// CA's certificate), out/tls.key (0600) and out/tls.crt, each replaced
// atomically (a reader between two renames sees a mismatched pair, which
// FileSource refuses and reads again on its next poll). It returns the
// leaf.
func (ca *CA) IssueToDir(req LeafRequest, out string) (*x509.Certificate, error) {
	cert, certPEM, keyPEM, err := ca.Issue(req)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(out, 0o700); err != nil {
		return nil, fmt.Errorf("output directory: %w", err)
	}
	for _, f := range []struct {
		name string
		data []byte
		perm fs.FileMode
	}{{CAFile, ca.CertPEM, 0o644}, {KeyFile, keyPEM, 0o600}, {CertFile, certPEM, 0o644}} {
		if err := writeFile(filepath.Join(out, f.name), f.data, f.perm); err != nil {
			return nil, err
		}
	}
	return cert.Leaf, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// writeFile replaces path atomically (renameio) with mode perm, whatever
// mode a file already there had.
func writeFile(path string, data []byte, perm fs.FileMode) error {
	f, err := renameio.NewPendingFile(path, renameio.WithPermissions(perm))
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer f.Cleanup()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.CloseAtomicallyReplace(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// randomSerial is a 128-bit random serial number (RFC 5280 allows 20
// octets; CA/B forum asks for 64 random bits at least).
func randomSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}
