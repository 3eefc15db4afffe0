package up

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"google.golang.org/grpc"

	"substrate.dev/ate/internal/apiserver"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/store"
)

// AuthConfig is the API server's authentication and authorisation
// (docs/security.md, Authentication and authorisation): kube-apiserver's
// flag names.
type AuthConfig struct {
	// TokenAuthFile is a static token CSV (auth.ReadTokenFile).
	TokenAuthFile string
	// OIDC verifies JWTs when IssuerURL is set.
	OIDC auth.OIDCConfig
	// IngressClientID, if set, is the audience of the issuer's JWTs
	// that the router's token ingress policy accepts (besides ingress
	// tokens); it must differ from OIDC.ClientID, so a credential for
	// the API never opens an actor and one for actors never opens the
	// API. Empty: the token ingress policy accepts ingress tokens only.
	IngressClientID string
	// PolicyFile is a YAML list of role bindings (auth.ReadPolicyFile).
	PolicyFile string
	// TrustDomain of component identities (default auth.DefaultTrustDomain).
	TrustDomain string
	// Insecure: the API listens without TLS on a network the operator
	// trusts. Only then may it run with no authenticator at all, and
	// then it checks nothing: every caller may do everything.
	Insecure bool
	// extra are static tokens the wiring adds (ate up's admin token and
	// its in-process router's token).
	extra []auth.StaticToken
}

// configured reports whether any authenticator is configured.
func (c AuthConfig) configured() bool {
	return c.TokenAuthFile != "" || c.OIDC.IssuerURL != "" || len(c.extra) > 0
}

// newAuthorizer builds the API server's interceptors' authorizer over the
// bindings in st; nil (no checks) only for an insecure server with no
// authenticator, which is logged.
func newAuthorizer(c AuthConfig, st store.Store, log *slog.Logger) (*auth.Authorizer, error) {
	log = orDiscard(log)
	if !c.configured() {
		if c.Insecure {
			log.Warn("API authentication is off (--insecure and no --token-auth-file or --oidc-issuer-url): anyone who reaches the API port may do anything")
			return nil, nil
		}
		// Components still prove who they are by certificate, so the
		// installation runs; users just have no way in yet (the Helm
		// chart's default until auth.* is set).
		log.Warn("no user authenticator (--token-auth-file, --oidc-issuer-url): only components, by certificate, may call the API")
	}
	tokens := append([]auth.StaticToken(nil), c.extra...)
	if c.TokenAuthFile != "" {
		fromFile, err := auth.ReadTokenFile(c.TokenAuthFile)
		if err != nil {
			return nil, err
		}
		tokens = append(tokens, fromFile...)
	}
	var chain auth.Chain
	if len(tokens) > 0 {
		s, err := auth.NewStatic(tokens)
		if err != nil {
			return nil, err
		}
		chain = append(chain, s)
	}
	if c.OIDC.IssuerURL != "" {
		oc := c.OIDC
		if c.IngressClientID != "" {
			oc.OtherAudiences = []string{c.IngressClientID}
		}
		o, err := auth.NewOIDC(oc)
		if err != nil {
			return nil, err
		}
		chain = append(chain, o)
	}
	var file []*store.RoleBinding
	if c.PolicyFile != "" {
		var err error
		if file, err = auth.ReadPolicyFile(c.PolicyFile); err != nil {
			return nil, err
		}
	}
	return &auth.Authorizer{Authn: chain, Policy: auth.NewPolicy(file, st), TrustDomain: c.TrustDomain,
		AlarmAtespace: apiserver.AlarmAtespace(st), Log: log}, nil
}

// authServerOptions are the interceptors of a (nil: none).
func authServerOptions(a *auth.Authorizer) []grpc.ServerOption {
	if a == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(a.UnaryInterceptor()), grpc.ChainStreamInterceptor(a.StreamInterceptor())}
}

// newIngressAuthenticator is the authenticator of the bearer tokens,
// other than ingress tokens, that the router's token ingress policy
// accepts: JWTs of the OIDC issuer carrying c.IngressClientID as their
// audience; nil when that is not set.
//
// Never the API's own credentials (static tokens, ate up's admin token,
// JWTs for OIDC.ClientID): the router's listener is plain HTTP and an
// actor's caller is often a browser or a third party, so a credential
// valid there would travel where the API's may not, and an actor's
// operator who saw one could replay it against the API.
func newIngressAuthenticator(c AuthConfig) (auth.TokenAuthenticator, error) {
	if c.IngressClientID == "" {
		return nil, nil
	}
	if c.OIDC.IssuerURL == "" {
		return nil, errors.New("--oidc-ingress-client-id needs --oidc-issuer-url")
	}
	if c.IngressClientID == c.OIDC.ClientID {
		return nil, fmt.Errorf("--oidc-ingress-client-id %q: must differ from --oidc-client-id, or every API token would open actors", c.IngressClientID)
	}
	oc := c.OIDC
	oc.ClientID, oc.OtherAudiences = c.IngressClientID, []string{c.OIDC.ClientID}
	o, err := auth.NewOIDC(oc)
	if err != nil {
		return nil, fmt.Errorf("--oidc-ingress-client-id: %w", err)
	}
	return o, nil
}

// checkIssuers refuses an OIDC issuer that is this API server's own
// actor-identity issuer: every actor mints tokens of that issuer for any
// audience it names, so each could make itself API and ingress
// credentials.
func checkIssuers(c AuthConfig, id IdentityConfig) error {
	if c.OIDC.IssuerURL == "" || id.IssuerURL == "" {
		return nil
	}
	norm := func(s string) string { return strings.ToLower(strings.TrimSuffix(s, "/")) }
	if norm(c.OIDC.IssuerURL) == norm(id.IssuerURL) {
		return fmt.Errorf("--oidc-issuer-url %s is this API server's own --issuer-url, whose tokens every actor may mint: "+
			"name the identity provider your users sign in with", c.OIDC.IssuerURL)
	}
	return nil
}

// wireAuth makes api's role binding changes apply at once, and lets the
// router's token ingress policy accept, besides ingress tokens, the
// ingress-audience JWTs of c (newIngressAuthenticator) of users who hold
// any role in the actor's atespace (auth.Policy.MayReach).
func wireAuth(api *apiserver.Server, a *auth.Authorizer, c AuthConfig) error {
	if a == nil {
		if c.IngressClientID != "" {
			return errors.New("--oidc-ingress-client-id: the API server has no authorisation to check the users it names against")
		}
		return nil
	}
	api.SetBindingsChanged(a.Policy.Invalidate)
	ia, err := newIngressAuthenticator(c)
	if err != nil || ia == nil {
		return err
	}
	api.SetIngressAuthenticator(ia, a.Policy.MayReach)
	return nil
}
