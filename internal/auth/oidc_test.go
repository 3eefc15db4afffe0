package auth

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// issuer is a real OIDC issuer over HTTPS (discovery and JWKS) whose
// signing key a test controls and rotates.
type issuer struct {
	srv *httptest.Server
	mu  sync.Mutex
	key *rsa.PrivateKey
	kid string
	// jwksFetches counts JWKS reads (go-oidc caches the set).
	jwksFetches int
}

func newIssuer(t *testing.T) *issuer {
	t.Helper()
	is := &issuer{}
	is.rotate(t, "k1")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": is.srv.URL, "jwks_uri": is.srv.URL + "/jwks",
			"id_token_signing_alg_values_supported": []string{"RS256"}})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		is.mu.Lock()
		defer is.mu.Unlock()
		is.jwksFetches++
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &is.key.PublicKey, KeyID: is.kid, Algorithm: "RS256", Use: "sig"}}})
	})
	is.srv = httptest.NewTLSServer(mux)
	t.Cleanup(is.srv.Close)
	return is
}

func (is *issuer) rotate(t *testing.T, kid string) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is.mu.Lock()
	is.key, is.kid = k, kid
	is.mu.Unlock()
}

// sign mints a JWT with claims, signed by key (the issuer's current one
// when nil).
func (is *issuer) sign(t *testing.T, key *rsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	is.mu.Lock()
	if key == nil {
		key, kid = is.key, is.kid
	}
	is.mu.Unlock()
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(sig).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (is *issuer) claims(aud string, exp time.Time) map[string]any {
	return map[string]any{"iss": is.srv.URL, "sub": "alice", "aud": aud, "exp": exp.Unix(), "iat": time.Now().Unix(), "groups": []string{"devs", "ops"}}
}

func TestOIDC(t *testing.T) {
	is := newIssuer(t)
	o, err := NewOIDC(OIDCConfig{IssuerURL: is.srv.URL, ClientID: "ate", GroupsClaim: "groups", GroupsPrefix: "oidc:", Client: is.srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	c := Chain{o}
	ctx := context.Background()
	hour := time.Now().Add(time.Hour)

	p, err := c.Authenticate(ctx, is.sign(t, nil, "", is.claims("ate", hour)))
	if err != nil {
		t.Fatalf("valid token: %v", err)
	}
	if p.Name != is.srv.URL+"#alice" || strings.Join(p.Groups, ",") != "oidc:devs,oidc:ops" {
		t.Errorf("principal %+v: want %s#alice in oidc:devs, oidc:ops (kube-apiserver's default prefix)", p, is.srv.URL)
	}

	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]string{
		"wrong signature": is.sign(t, other, "k1", is.claims("ate", hour)),
		"unknown key":     is.sign(t, other, "nope", is.claims("ate", hour)),
		"wrong audience":  is.sign(t, nil, "", is.claims("someone-else", hour)),
		"expired":         is.sign(t, nil, "", is.claims("ate", time.Now().Add(-time.Minute))),
		"malformed":       "eyJhbGciOiJSUzI1NiJ9.not-json.sig",
	} {
		if _, err := c.Authenticate(ctx, tok); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s: err = %v, want ErrUnauthenticated", name, err)
		}
	}

	// Rotation: a token signed by a new key verifies once the issuer
	// publishes it (go-oidc refetches the JWKS for an unknown kid)...
	is.rotate(t, "k2")
	if _, err := c.Authenticate(ctx, is.sign(t, nil, "", is.claims("ate", hour))); err != nil {
		t.Errorf("token of the rotated key: %v", err)
	}
	// ...and the set is cached, not fetched for every token.
	before := is.jwksFetches
	if _, err := c.Authenticate(ctx, is.sign(t, nil, "", is.claims("ate", hour))); err != nil || is.jwksFetches != before {
		t.Errorf("second token of the same key: %v, JWKS fetched %d more times; want cached", err, is.jwksFetches-before)
	}
}

// TestOIDCGroupsPrefix: an issuer's group named like one of ours (an IdP
// administrator, or a user allowed to create groups there, names one
// ate:admins) does not make its members our admins: groups get
// DefaultGroupsPrefix unless the flag names another, or "-" none.
func TestOIDCGroupsPrefix(t *testing.T) {
	is := newIssuer(t)
	for _, c := range []struct{ prefix, want string }{
		{"", DefaultGroupsPrefix + AdminsGroup},
		{"corp:", "corp:" + AdminsGroup},
		{"-", AdminsGroup},
	} {
		o, err := NewOIDC(OIDCConfig{IssuerURL: is.srv.URL, ClientID: "ate", GroupsClaim: "groups", GroupsPrefix: c.prefix, Client: is.srv.Client()})
		if err != nil {
			t.Fatal(err)
		}
		claims := is.claims("ate", time.Now().Add(time.Hour))
		claims["groups"] = []string{AdminsGroup}
		p, err := o.Authenticate(context.Background(), is.sign(t, nil, "", claims))
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Groups) != 1 || p.Groups[0] != c.want {
			t.Errorf("--oidc-groups-prefix=%q: groups %q, want [%s]", c.prefix, p.Groups, c.want)
		}
	}
}

// TestOIDCClock: expiry is checked against Config.Now.
func TestOIDCClock(t *testing.T) {
	is := newIssuer(t)
	later := time.Now().Add(2 * time.Hour)
	o, err := NewOIDC(OIDCConfig{IssuerURL: is.srv.URL, ClientID: "ate", UsernamePrefix: "-", Client: is.srv.Client(), Now: func() time.Time { return later }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Authenticate(context.Background(), is.sign(t, nil, "", is.claims("ate", time.Now().Add(time.Hour)))); err == nil {
		t.Fatal("a token expired by the verifier's clock was accepted")
	}
}

func TestNewOIDCChecks(t *testing.T) {
	for _, c := range []OIDCConfig{{IssuerURL: "http://plain", ClientID: "x"}, {IssuerURL: "https://x"}} {
		if _, err := NewOIDC(c); err == nil {
			t.Errorf("NewOIDC(%+v) accepted", c)
		}
	}
}

// payload returns a JWT's decoded claims, unverified (tests only).
func payload(t *testing.T, tok string) []byte {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", tok)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	return b
}
