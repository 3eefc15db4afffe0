package ateconfig

import (
	"crypto/x509"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"substrate.dev/ate/internal/pki"
)

// DialOptions are the gRPC dial options every client of the API server
// built from a Config uses (the CLI, the dashboard, the e2e harness): TLS
// verifying the server against CertificateAuthority
// (pki.UserClientConfig: an apiserver identity, or the dialled host name
// or IP address in the certificate's SANs), or plaintext when the config
// names no CA; and Token, if set, as per-RPC bearer credentials (sent in
// plaintext only to a server the config says is plaintext). Errors: an
// unreadable CA file, one without PEM certificates.
func DialOptions(c Config) ([]grpc.DialOption, error) {
	var opts []grpc.DialOption
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
