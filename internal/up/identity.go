package up

import (
	"log/slog"
	"net"
	"net/http"
	"time"

	"substrate.dev/ate/internal/identity"
	"substrate.dev/ate/internal/store"
)

// IdentityConfig configures actor identity (internal/identity,
// docs/security.md "Actor identity"): the tokens actors mint through
// their worker's self-service endpoint, and the discovery document and
// JWKS the API server's HTTP listener serves.
type IdentityConfig struct {
	// IssuerURL is the tokens' iss, where verifiers fetch
	// <IssuerURL>/.well-known/openid-configuration. Default
	// http://<the HTTP listener's address> (an unspecified host becomes
	// 127.0.0.1); with neither, tokens are refused (503). Replicas
	// behind one address must all be given that address.
	IssuerURL string
	// TokenTTL is a token's lifetime (identity.DefaultTokenTTL, 10 min).
	TokenTTL time.Duration
	// KeyRotation is each signing key's signing period
	// (identity.DefaultRotation, 24 h).
	KeyRotation time.Duration
}

// newIssuer returns the issuer cfg describes over the record store st.
func (cfg IdentityConfig) newIssuer(st store.Store, log *slog.Logger) *identity.Issuer {
	return identity.New(st, cfg.IssuerURL, identity.Config{TokenTTL: cfg.TokenTTL, Rotation: cfg.KeyRotation, Logger: log})
}

// issuerURLFor is the default issuer URL for an HTTP listener at addr.
func issuerURLFor(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// withIdentity serves iss's discovery document and JWKS beside h (the
// dashboard), at the issuer URL's path.
func withIdentity(h http.Handler, iss *identity.Issuer) http.Handler {
	if iss == nil {
		return h
	}
	mux := http.NewServeMux()
	mux.Handle("/", h)
	for _, p := range iss.Patterns() {
		mux.Handle(p, iss.Handler())
	}
	return mux
}
