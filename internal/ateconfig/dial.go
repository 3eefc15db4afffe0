package ateconfig

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"substrate.dev/ate/internal/pki"
)

// ErrPlaintextToken refuses to send a bearer token without TLS to a
// server off this machine.
var ErrPlaintextToken = errors.New("refusing to send the token in plaintext to a server that is not on loopback: " +
	"give the config a certificate-authority (the API server's CA) or reach the server through an encrypted tunnel on 127.0.0.1")

// LoopbackServer reports whether every address server names (a Config
// Server: host:port, a comma-separated list, dns:///host:port) is on
// this machine: localhost or a loopback IP. A k8s:/// Service is not.
func LoopbackServer(server string) bool {
	target := server
	if rest, ok := strings.CutPrefix(server, "dns:///"); ok {
		target = rest
	} else if strings.Contains(server, "://") {
		return false
	}
	if target == "" {
		return false
	}
	for _, a := range strings.Split(target, ",") {
		host, _, err := net.SplitHostPort(strings.TrimSpace(a))
		if err != nil {
			host = strings.TrimSpace(a)
		}
		if ip := net.ParseIP(host); !(host == "localhost" || (ip != nil && ip.IsLoopback())) {
			return false
		}
	}
	return true
}

// DialOptions are the gRPC dial options every client of the API server
// built from a Config uses (the CLI, the dashboard, the e2e harness): TLS
// verifying the server against CertificateAuthority
// (pki.UserClientConfig: an apiserver identity, or the dialled host name
// or IP address in the certificate's SANs), or plaintext when the config
// names no CA; and Token, if set, as per-RPC bearer credentials (sent in
// plaintext only to a server the config says is plaintext, and only on
// this machine: a token in plaintext over a network is anyone's on the
// path). Errors: ErrPlaintextToken, an unreadable CA file, one without
// PEM certificates.
func DialOptions(c Config) ([]grpc.DialOption, error) {
	var opts []grpc.DialOption
	if c.Token != "" && c.CertificateAuthority == "" && !LoopbackServer(c.Server) {
		return nil, fmt.Errorf("%w: server %s", ErrPlaintextToken, c.Server)
	}
	if c.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(BearerToken{Token: c.Token, AllowPlaintext: c.CertificateAuthority == ""}))
	}
	if c.CertificateAuthority == "" {
		return append(opts, grpc.WithTransportCredentials(insecure.NewCredentials())), nil
	}
	pem, err := os.ReadFile(c.CertificateAuthority)
	if err != nil {
		return nil, fmt.Errorf("certificate-authority: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("certificate-authority %s: no PEM certificate in it", c.CertificateAuthority)
	}
	return append(opts, grpc.WithTransportCredentials(credentials.NewTLS(pki.UserClientConfig(roots)))), nil
}
