package identity

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// The issuer's OpenID Connect discovery document and JWKS, over HTTP:
// what verifiers of actor tokens fetch. An HTTP server by its nature (the
// protocol is HTTP's), the one part of this package that answers with
// HTTP statuses (internal/archtest names it); the API server's HTTP
// listener serves it (internal/up).

// Paths the discovery handler serves, below the issuer URL's path.
const (
	DiscoveryPath = "/.well-known/openid-configuration"
	JWKSPath      = "/openid/v1/jwks"
)

// Discovery is the OpenID Connect Discovery 1.0 document the issuer
// serves (the fields a verifier of ID tokens reads).
type Discovery struct {
	Issuer                           string   `json:"issuer"`
	JWKSURI                          string   `json:"jwks_uri"`
	ResponseTypesSupported           []string `json:"response_types_supported"`
	SubjectTypesSupported            []string `json:"subject_types_supported"`
	IDTokenSigningAlgValuesSupported []string `json:"id_token_signing_alg_values_supported"`
	ClaimsSupported                  []string `json:"claims_supported"`
}

// Handler serves GET <issuer path>/.well-known/openid-configuration and
// GET <issuer path>/openid/v1/jwks; other paths 404. The JWKS may be
// cached for min(Rotation/4, TokenTTL/2, 1 minute): keys are published
// well before they sign. 503 while no issuer URL is set or the store
// cannot be read.
func (i *Issuer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		iss := i.IssuerURL()
		if iss == "" {
			http.Error(w, ErrNoIssuer.Error(), http.StatusServiceUnavailable)
			return
		}
		u, err := url.Parse(iss)
		if err != nil {
			http.Error(w, fmt.Sprintf("issuer URL %q: %v", iss, err), http.StatusInternalServerError)
			return
		}
		base := strings.TrimSuffix(u.Path, "/")
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case base + DiscoveryPath:
			_ = json.NewEncoder(w).Encode(Discovery{Issuer: iss, JWKSURI: iss + JWKSPath,
				ResponseTypesSupported: []string{"id_token"}, SubjectTypesSupported: []string{"public"},
				IDTokenSigningAlgValuesSupported: []string{string(Algorithm)},
				ClaimsSupported:                  []string{"iss", "sub", "aud", "exp", "iat", "nbf", "jti", "uid", "template"}})
		case base + JWKSPath:
			set, err := i.ring.JWKS(r.Context())
			if err != nil {
				http.Error(w, "signing keys: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
			w.Header().Set("Cache-Control", fmt.Sprintf("public, max-age=%d", int(i.cfg.refreshEvery().Seconds())))
			w.Header().Set("Content-Type", "application/jwk-set+json")
			_ = json.NewEncoder(w).Encode(set)
		default:
			w.Header().Del("Content-Type")
			http.NotFound(w, r)
		}
	})
	return mux
}

// Patterns are the http.ServeMux patterns Handler answers at the issuer
// URL's path now (at the root while none is set).
func (i *Issuer) Patterns() []string {
	base := ""
	if u, err := url.Parse(i.IssuerURL()); err == nil {
		base = strings.TrimSuffix(u.Path, "/")
	}
	return []string{"GET " + base + DiscoveryPath, "GET " + base + JWKSPath}
}
