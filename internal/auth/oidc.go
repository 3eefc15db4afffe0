package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
)

// OIDCConfig configures JWT authentication against an OIDC issuer
// (kube-apiserver's --oidc-* flags and semantics).
type OIDCConfig struct {
	// IssuerURL is the issuer (https); its discovery document is
	// IssuerURL/.well-known/openid-configuration.
	IssuerURL string
	// ClientID is the audience a token must carry.
	ClientID string
	// OtherAudiences are audiences a token must not also carry: those of
	// the other credential the same issuer serves (the API's and the
	// router's ingress audience), so that one token never stands for
	// both. Set by the command wiring, not a flag.
	OtherAudiences []string
	// UsernameClaim names the user (default "sub"); UsernamePrefix is
	// put before it. As in kube-apiserver, a claim other than "email"
	// with no prefix given is prefixed "<issuer>#"; "-" means no prefix.
	UsernameClaim, UsernamePrefix string
	// GroupsClaim names the groups claim (a string or a list of
	// strings); empty means no groups. GroupsPrefix is put before each:
	// empty means DefaultGroupsPrefix, "-" none.
	GroupsClaim, GroupsPrefix string
	// CAFile is a PEM bundle the issuer's TLS certificate is verified
	// against; empty: the system roots.
	CAFile string
	// Client, if set, is the HTTP client discovery and JWKS use (tests;
	// a client carrying credentials for an issuer that needs them). It
	// overrides CAFile.
	Client *http.Client
	// Now, if set, is the clock expiry is checked against (tests).
	Now func() time.Time
}

// DefaultGroupsPrefix is put before OIDC groups unless
// OIDCConfig.GroupsPrefix says otherwise, so that whoever administers the
// issuer's groups cannot name one of ours: an IdP group "ate:admins"
// becomes "oidc:ate:admins", not AdminsGroup.
const DefaultGroupsPrefix = "oidc:"

// OIDC verifies JWTs signed by an OIDC issuer's keys. Discovery happens on
// first use and is retried on later calls until it succeeds, so an API
// server may start before its issuer answers; go-oidc then caches the
// JWKS and refetches it when a token names a key it does not have (key
// rotation).
type OIDC struct {
	cfg    OIDCConfig
	client *http.Client

	mu       sync.Mutex
	verifier *oidc.IDTokenVerifier
}

// NewOIDC checks cfg and reads its CA file; it does not reach the issuer.
func NewOIDC(cfg OIDCConfig) (*OIDC, error) {
	if !strings.HasPrefix(cfg.IssuerURL, "https://") {
		return nil, fmt.Errorf("--oidc-issuer-url %q: must be an https URL", cfg.IssuerURL)
	}
	if cfg.ClientID == "" {
		return nil, errors.New("--oidc-client-id is required with --oidc-issuer-url")
	}
	if cfg.UsernameClaim == "" {
		cfg.UsernameClaim = "sub"
	}
	switch {
	case cfg.UsernamePrefix == "-":
		cfg.UsernamePrefix = ""
	case cfg.UsernamePrefix == "" && cfg.UsernameClaim != "email":
		cfg.UsernamePrefix = cfg.IssuerURL + "#"
	}
	switch cfg.GroupsPrefix {
	case "-":
		cfg.GroupsPrefix = ""
	case "":
		cfg.GroupsPrefix = DefaultGroupsPrefix
	}
	client := cfg.Client
	if client == nil && cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--oidc-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--oidc-ca-file %s: no PEM certificates", cfg.CAFile)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	}
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	return &OIDC{cfg: cfg, client: client}, nil
}

// verifierFor returns the verifier, running discovery if it has not
// succeeded yet.
func (o *OIDC) verifierFor(ctx context.Context) (*oidc.IDTokenVerifier, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.verifier != nil {
		return o.verifier, nil
	}
	// The provider's key set lives as long as the process, not the call
	// that happened to discover it.
	pctx := oidc.ClientContext(context.WithoutCancel(ctx), o.client)
	dctx, cancel := context.WithTimeout(pctx, 30*time.Second)
	defer cancel()
	p, err := oidc.NewProvider(dctx, o.cfg.IssuerURL)
	if err != nil {
		return nil, fmt.Errorf("OIDC discovery of %s: %w", o.cfg.IssuerURL, err)
	}
	// NewProvider's remote key set keeps the context it was given for its
	// fetches; rebuild it over the long-lived one.
	var meta struct {
		JWKSURI string   `json:"jwks_uri"`
		Algs    []string `json:"id_token_signing_alg_values_supported"`
	}
	if err := p.Claims(&meta); err != nil {
		return nil, fmt.Errorf("OIDC discovery of %s: %w", o.cfg.IssuerURL, err)
	}
	keys := oidc.NewRemoteKeySet(pctx, meta.JWKSURI)
	o.verifier = oidc.NewVerifier(o.cfg.IssuerURL, keys, &oidc.Config{
		ClientID:             o.cfg.ClientID,
		SupportedSigningAlgs: meta.Algs,
		Now:                  o.cfg.Now,
	})
	return o.verifier, nil
}

// looksLikeJWT: three base64url parts. Anything else is another
// authenticator's (a static token), not a malformed JWT.
func looksLikeJWT(token string) bool {
	return strings.Count(token, ".") == 2 && strings.HasPrefix(token, "eyJ")
}

// Authenticate implements Authenticator: signature (issuer's JWKS),
// issuer, audience and expiry checked by go-oidc, then the claims read.
func (o *OIDC) Authenticate(ctx context.Context, token string) (*Principal, error) {
	if !looksLikeJWT(token) {
		return nil, errNoMatch
	}
	v, err := o.verifierFor(ctx)
	if err != nil {
		return nil, err
	}
	idt, err := v.Verify(ctx, token)
	if err != nil {
		return nil, err
	}
	for _, a := range idt.Audience {
		if slices.Contains(o.cfg.OtherAudiences, a) {
			return nil, fmt.Errorf("JWT: audience %q is another credential's besides %q; ask the issuer for a token of one audience", a, o.cfg.ClientID)
		}
	}
	var claims map[string]json.RawMessage
	if err := idt.Claims(&claims); err != nil {
		return nil, fmt.Errorf("JWT claims: %w", err)
	}
	var user string
	if raw, ok := claims[o.cfg.UsernameClaim]; !ok || json.Unmarshal(raw, &user) != nil || user == "" {
		return nil, fmt.Errorf("JWT: claim %q missing or not a string", o.cfg.UsernameClaim)
	}
	if o.cfg.UsernameClaim == "email" {
		// kube-apiserver: an email is only trusted when verified.
		var verified *bool
		if raw, ok := claims["email_verified"]; ok {
			_ = json.Unmarshal(raw, &verified)
		}
		if verified != nil && !*verified {
			return nil, errors.New("JWT: email not verified")
		}
	}
	p := &Principal{Name: o.cfg.UsernamePrefix + user}
	if o.cfg.GroupsClaim != "" {
		if raw, ok := claims[o.cfg.GroupsClaim]; ok {
			var list []string
			if err := json.Unmarshal(raw, &list); err != nil {
				var one string
				if err := json.Unmarshal(raw, &one); err != nil {
					return nil, fmt.Errorf("JWT: claim %q is neither a string nor a list of strings", o.cfg.GroupsClaim)
				}
				list = []string{one}
			}
			for _, g := range list {
				p.Groups = append(p.Groups, o.cfg.GroupsPrefix+g)
			}
		}
	}
	return p, nil
}
