package auth

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNewAuthorizer: an API server with no user authenticator still
// admits components by certificate (the Helm chart's default, found on a
// real cluster to refuse to start before); no user token is accepted.
// Only --insecure with no authenticator checks nothing. The tokens the
// wiring adds and the token file's are both accepted.
func TestNewAuthorizer(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte("file-token-0123456789,vera,2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	extra := []StaticToken{AdminToken("admin-token-0123456789")}
	for _, c := range []struct {
		name     string
		cfg      Config
		wantNone bool
		// accepted and refused are bearer tokens.
		accepted, refused []string
	}{
		{name: "no authenticator", cfg: Config{}, refused: []string{"any-token"}},
		{name: "no authenticator, insecure", cfg: Config{Insecure: true}, wantNone: true},
		{name: "tokens", cfg: Config{TokenAuthFile: tokens, Extra: extra},
			accepted: []string{"file-token-0123456789", "admin-token-0123456789"}, refused: []string{"any-token"}},
		{name: "tokens, insecure", cfg: Config{Insecure: true, Extra: extra}, accepted: []string{"admin-token-0123456789"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, err := NewAuthorizer(c.cfg, nil, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if (a == nil) != c.wantNone {
				t.Fatalf("authorizer %v, want none %v", a, c.wantNone)
			}
			if (len(a.ServerOptions()) == 0) != c.wantNone {
				t.Errorf("%d server options, want none %v", len(a.ServerOptions()), c.wantNone)
			}
			for _, tok := range c.accepted {
				if _, err := a.Authn.Authenticate(context.Background(), tok); err != nil {
					t.Errorf("%s: %v, want accepted", tok, err)
				}
			}
			for _, tok := range c.refused {
				if _, err := a.Authn.Authenticate(context.Background(), tok); !errors.Is(err, ErrUnauthenticated) {
					t.Errorf("%s: %v, want ErrUnauthenticated", tok, err)
				}
			}
		})
	}
}

// TestCheckIssuer: users' OIDC issuer may not be the API server's own
// actor-identity issuer, whose tokens any actor mints.
func TestCheckIssuer(t *testing.T) {
	for _, c := range []struct {
		oidc, identity string
		refused        bool
	}{
		{"https://idp.example", "https://ate.example", false},
		{"https://idp.example", "", false},
		{"", "https://ate.example", false},
		{"https://ate.example", "https://ate.example", true},
		{"https://ATE.example/", "https://ate.example", true},
	} {
		t.Run(c.oidc+" "+c.identity, func(t *testing.T) {
			err := Config{OIDC: OIDCConfig{IssuerURL: c.oidc}}.CheckIssuer(c.identity)
			if (err != nil) != c.refused || (err != nil && !strings.Contains(err.Error(), "every actor may mint")) {
				t.Errorf("--oidc-issuer-url %q, --issuer-url %q: %v, want refused %v", c.oidc, c.identity, err, c.refused)
			}
		})
	}
}

// TestNewIngressAuthenticator: the ingress audience needs an issuer and
// must not be the API's own, or every API token would open actors.
func TestNewIngressAuthenticator(t *testing.T) {
	oidc := OIDCConfig{IssuerURL: "https://issuer.example", ClientID: "ate"}
	for _, c := range []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"unset", Config{OIDC: oidc}, ""},
		{"own audience", Config{OIDC: oidc, IngressClientID: "ate-ingress"}, ""},
		{"the API's audience", Config{OIDC: oidc, IngressClientID: "ate"}, "must differ from --oidc-client-id"},
		{"no issuer", Config{IngressClientID: "ate-ingress"}, "needs --oidc-issuer-url"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, err := NewIngressAuthenticator(c.cfg)
			switch {
			case c.wantErr == "" && err != nil:
				t.Error(err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Errorf("err %v, want one saying %q", err, c.wantErr)
			case c.wantErr == "" && (a == nil) != (c.cfg.IngressClientID == ""):
				t.Errorf("authenticator %v", a)
			}
		})
	}
}
