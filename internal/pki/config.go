package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"substrate.dev/ate/internal/auth"
)

// ClientCerts says what a server asks of its clients' certificates.
type ClientCerts int

const (
	// ClientCertOptional verifies a certificate if the client sends one
	// and accepts clients without (the API server: users come with bearer
	// tokens, as with kube-apiserver).
	ClientCertOptional ClientCerts = iota
	// ClientCertRequired refuses, at the handshake, a client without a
	// valid certificate (node agents, worker tunnels).
	ClientCertRequired
)

// ServerConfig is the TLS config of a listener presenting src's current
// leaf. Client certificates are asked for per mode; one that is given
// must chain to src's current roots, be valid now, carry client-auth
// usage and a component identity of trustDomain, and (if allow is not
// empty) name one of allow's components — else the handshake fails.
func ServerConfig(src Source, trustDomain string, mode ClientCerts, allow ...auth.Component) *tls.Config {
	clientAuth := tls.RequestClientCert
	if mode == ClientCertRequired {
		clientAuth = tls.RequireAnyClientCert
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		ClientAuth:     clientAuth,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return src.Certificate() },
		// Verification is ours (VerifyConnection) so that the roots are
		// the source's current ones, read again on every handshake.
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				if mode == ClientCertRequired {
					return errors.New("a client certificate is required")
				}
				return nil
			}
			id, err := verifyPeer(cs.PeerCertificates, src.Roots(), x509.ExtKeyUsageClientAuth, trustDomain)
			if err != nil {
				return fmt.Errorf("client certificate: %w", err)
			}
			if len(allow) > 0 && !slices.Contains(allow, id.Component) {
				return fmt.Errorf("client certificate: component %s may not connect here (allowed: %v)", id, allow)
			}
			return nil
		},
	}
}

// ClientConfig is the TLS config of a component dialling another: it
// presents src's current leaf and accepts only a server whose
// certificate chains to src's current roots, is valid now, carries
// server-auth usage and the identity of component server in trustDomain
// (any name). Host names are not checked: the identity is what is
// verified (SPIFFE's way), so addresses that change (Pod IPs, replica
// lists) need no SANs.
func ClientConfig(src Source, trustDomain string, server auth.Component) *tls.Config {
	return ClientConfigFor(src, trustDomain, auth.Identity{Component: server})
}

// ClientConfigFor is ClientConfig accepting only the server whose
// identity is server, its name included (any name when server.Name is
// empty): a node's agent or worker tunnel is trusted only as the node
// that registered it, not as any node the CA ever issued a certificate
// to.
func ClientConfigFor(src Source, trustDomain string, server auth.Identity) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // verified in VerifyConnection, against the current roots
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, err := src.Certificate()
			if c == nil && err == nil {
				c = &tls.Certificate{} // none to send (crypto/tls wants a non-nil one)
			}
			return c, err
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := verifyPeer(cs.PeerCertificates, src.Roots(), x509.ExtKeyUsageServerAuth, trustDomain)
			if err != nil {
				return fmt.Errorf("server certificate: %w", err)
			}
			if id.Component != server.Component {
				return fmt.Errorf("server certificate: %s is not a %s", id, server.Component)
			}
			if server.Name != "" && id.Name != server.Name {
				return fmt.Errorf("server certificate: %s is not %s", id, server)
			}
			return nil
		},
	}
}

// UserClientConfig is the TLS config of a client without a certificate
// (the CLI, the e2e harness) dialling the API server: the server's
// certificate must chain to roots and either carry an apiserver identity
// (of any trust domain: the client does not know it) or name the host
// dialled (cs.ServerName, an IP address included) in its SANs — a serving
// certificate from another issuer (cert-manager with dnsNames).
func UserClientConfig(roots *x509.CertPool) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // verified in VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("server sent no certificate")
			}
			leaf := cs.PeerCertificates[0]
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: pool(cs.PeerCertificates[1:]),
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				return fmt.Errorf("server certificate: %w", err)
			}
			for _, u := range leaf.URIs {
				if id, err := auth.ParseIdentityURI(u, u.Host); err == nil && id.Component == auth.ComponentAPIServer {
					return nil
				}
			}
			host := cs.ServerName
			if err := leaf.VerifyHostname(host); err != nil {
				return fmt.Errorf("server certificate: no apiserver identity, and %w", err)
			}
			return nil
		},
	}
}

// verifyPeer checks chain (leaf first) against roots for usage and
// returns the leaf's identity in trustDomain.
func verifyPeer(chain []*x509.Certificate, roots *x509.CertPool, usage x509.ExtKeyUsage, trustDomain string) (auth.Identity, error) {
	if len(chain) == 0 {
		return auth.Identity{}, errors.New("none sent")
	}
	leaf := chain[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: pool(chain[1:]), KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return auth.Identity{}, err
	}
	return identityOf(leaf, trustDomain)
}

// identityOf reads leaf's one SPIFFE URI SAN as an identity of
// trustDomain (default auth.DefaultTrustDomain).
func identityOf(leaf *x509.Certificate, trustDomain string) (auth.Identity, error) {
	if trustDomain == "" {
		trustDomain = auth.DefaultTrustDomain
	}
	var spiffe []*url.URL
	for _, u := range leaf.URIs {
		if strings.EqualFold(u.Scheme, "spiffe") {
			spiffe = append(spiffe, u)
		}
	}
	if len(spiffe) != 1 {
		return auth.Identity{}, fmt.Errorf("want exactly one spiffe:// URI SAN naming the component, found %d", len(spiffe))
	}
	return auth.ParseIdentityURI(spiffe[0], trustDomain)
}

func pool(certs []*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}

// PeerIdentity returns the component identity of a TLS connection's peer
// certificate in trustDomain; false without a certificate or identity.
// Only meaningful for connections whose handshake ServerConfig or
// ClientConfig verified: the chain is not checked again here.
func PeerIdentity(cs *tls.ConnectionState, trustDomain string) (auth.Identity, bool) {
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return auth.Identity{}, false
	}
	id, err := identityOf(cs.PeerCertificates[0], trustDomain)
	return id, err == nil
}

// PrincipalFromPeer returns the component principal of a gRPC call whose
// client presented a certificate (verified by the server's ServerConfig
// handshake); false for a call over plaintext or without a client
// certificate (then a bearer token decides, internal/auth).
func PrincipalFromPeer(ctx context.Context, trustDomain string) (*auth.Principal, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil, false
	}
	id, ok := PeerIdentity(&info.State, trustDomain)
	if !ok {
		return nil, false
	}
	return &auth.Principal{Component: &id}, true
}

// PeerHost is the address a gRPC call comes from, without its port (""
// when unknown): the name of a caller that has proved nothing yet.
func PeerHost(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	host := p.Addr.String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return host
}
