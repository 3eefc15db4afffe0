package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"google.golang.org/grpc"

	"substrate.dev/ate/internal/store"
)

// Config is the API server's authentication and authorisation
// (docs/security.md, Authentication and authorisation): kube-apiserver's
// flag names.
type Config struct {
	// TokenAuthFile is a static token CSV (ReadTokenFile).
	TokenAuthFile string
	// OIDC verifies JWTs when IssuerURL is set.
	OIDC OIDCConfig
	// IngressClientID, if set, is the audience of the issuer's JWTs
	// that the router's token ingress policy accepts (besides ingress
	// tokens); it must differ from OIDC.ClientID, so a credential for
	// the API never opens an actor and one for actors never opens the
	// API. Empty: the token ingress policy accepts ingress tokens only.
	IngressClientID string
	// PolicyFile is a YAML list of role bindings (ReadPolicyFile).
	PolicyFile string
	// TrustDomain of component identities (default DefaultTrustDomain).
	TrustDomain string
	// Insecure: the API listens without TLS on a network the operator
	// trusts. Only then may it run with no authenticator at all, and
	// then it checks nothing: every caller may do everything.
	Insecure bool
	// NodeAudience is the audience of the ServiceAccount tokens worker
	// Pods show for their node certificates (apiserver
	// --node-token-audience), when the API server issues those; set by
	// the wiring. A JWT carrying it is never a user's or an actor
	// caller's credential, and it must differ from both client IDs.
	NodeAudience string
	// Extra are static tokens the wiring adds (ate up's admin token and
	// its in-process router's token); never read from a flag or file.
	Extra []StaticToken
}

// CheckNodeAudience refuses a node token audience that is also a client
// ID: a token a worker Pod shows for its certificate would then be a
// user's credential too, or the other way round.
func (c Config) CheckNodeAudience() error {
	if c.NodeAudience == "" {
		return nil
	}
	for flag, id := range map[string]string{"--oidc-client-id": c.OIDC.ClientID, "--oidc-ingress-client-id": c.IngressClientID} {
		if id == c.NodeAudience {
			return fmt.Errorf("--node-token-audience %q: must differ from %s, or a worker Pod's token would be a credential there too", c.NodeAudience, flag)
		}
	}
	return nil
}

// nonEmpty is the non-empty ones of ss.
func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// configured reports whether any authenticator is configured.
func (c Config) configured() bool {
	return c.TokenAuthFile != "" || c.OIDC.IssuerURL != "" || len(c.Extra) > 0
}

// NewAuthorizer builds the API server's interceptors' authorizer of c
// over the API-managed role bindings of bindings, looking alarms'
// atespaces up with alarmAtespace (Authorizer.AlarmAtespace). It is nil
// (no checks) only for an insecure server with no authenticator, which
// is logged, as is a secure one with no user authenticator (components
// only).
func NewAuthorizer(c Config, bindings BindingSource, alarmAtespace func(ctx context.Context, id string) (string, error), log *slog.Logger) (*Authorizer, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
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
	chain, err := c.authenticators()
	if err != nil {
		return nil, err
	}
	var file []*store.RoleBinding
	if c.PolicyFile != "" {
		if file, err = ReadPolicyFile(c.PolicyFile); err != nil {
			return nil, err
		}
	}
	return &Authorizer{Authn: chain, Policy: NewPolicy(file, bindings), TrustDomain: c.TrustDomain,
		AlarmAtespace: alarmAtespace, Log: log}, nil
}

// authenticators is c's chain: the static tokens (Extra, then the token
// file's), then the OIDC issuer's JWTs for OIDC.ClientID that do not
// also carry IngressClientID (one token never stands for both
// credentials).
func (c Config) authenticators() (Chain, error) {
	tokens := append([]StaticToken(nil), c.Extra...)
	if c.TokenAuthFile != "" {
		fromFile, err := ReadTokenFile(c.TokenAuthFile)
		if err != nil {
			return nil, err
		}
		tokens = append(tokens, fromFile...)
	}
	var chain Chain
	if len(tokens) > 0 {
		s, err := NewStatic(tokens)
		if err != nil {
			return nil, err
		}
		chain = append(chain, s)
	}
	if c.OIDC.IssuerURL != "" {
		oc := c.OIDC
		oc.OtherAudiences = nonEmpty(c.IngressClientID, c.NodeAudience)
		o, err := NewOIDC(oc)
		if err != nil {
			return nil, err
		}
		chain = append(chain, o)
	}
	return chain, nil
}

// ServerOptions are a's interceptors as gRPC server options; none for a
// nil a (no checks).
func (a *Authorizer) ServerOptions() []grpc.ServerOption {
	if a == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(a.UnaryInterceptor()), grpc.ChainStreamInterceptor(a.StreamInterceptor())}
}

// NewIngressAuthenticator is the authenticator of the bearer tokens,
// other than ingress tokens, that the router's token ingress policy
// accepts: JWTs of c's OIDC issuer carrying c.IngressClientID as their
// audience; nil when that is not set.
//
// Never the API's own credentials (static tokens, ate up's admin token,
// JWTs for OIDC.ClientID): the router's listener is plain HTTP and an
// actor's caller is often a browser or a third party, so a credential
// valid there would travel where the API's may not, and an actor's
// operator who saw one could replay it against the API.
func NewIngressAuthenticator(c Config) (TokenAuthenticator, error) {
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
	oc.ClientID, oc.OtherAudiences = c.IngressClientID, nonEmpty(c.OIDC.ClientID, c.NodeAudience)
	o, err := NewOIDC(oc)
	if err != nil {
		return nil, fmt.Errorf("--oidc-ingress-client-id: %w", err)
	}
	return o, nil
}

// CheckIssuer refuses c's OIDC issuer when it is own, this API server's
// actor-identity issuer (--issuer-url; empty: none yet): every actor
// mints tokens of that issuer for any audience it names, so each could
// make itself API and ingress credentials.
func (c Config) CheckIssuer(own string) error {
	if c.OIDC.IssuerURL == "" || own == "" {
		return nil
	}
	norm := func(s string) string { return strings.ToLower(strings.TrimSuffix(s, "/")) }
	if norm(c.OIDC.IssuerURL) == norm(own) {
		return fmt.Errorf("--oidc-issuer-url %s is this API server's own --issuer-url, whose tokens every actor may mint: "+
			"name the identity provider your users sign in with", c.OIDC.IssuerURL)
	}
	return nil
}
