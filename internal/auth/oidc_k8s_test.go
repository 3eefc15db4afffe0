package auth

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"substrate.dev/ate/internal/k8s/k8stest"
)

// TestServiceAccountTokens verifies Kubernetes ServiceAccount tokens
// minted by a real kube-apiserver (TokenRequest) against its OIDC
// discovery document and JWKS. envtest's kube-apiserver serves discovery
// only to authenticated callers (the system:service-account-issuer-discovery
// ClusterRole is bound to system:serviceaccounts, and anonymous requests
// are not bound), over TLS from its own CA: the verifier's HTTP client
// therefore carries the admin connection's CA and client certificate. In
// a cluster, bind that ClusterRole to system:unauthenticated and pass
// --oidc-ca-file (docs/security.md).
func TestServiceAccountTokens(t *testing.T) {
	env := k8stest.Start(t)
	ctx := context.Background()
	// envtest's kube-apiserver listens on loopback only but publishes its
	// jwks_uri at its advertised address (the machine's, where nothing
	// answers; a cluster sets --service-account-jwks-uri): every
	// connection goes to where it listens, verified as 127.0.0.1 against
	// its CA, with the admin's client certificate.
	tlsCfg, err := rest.TLSConfigFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	host, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg.ServerName = host.Hostname()
	var d net.Dialer
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, host.Host)
		}}}
	raw, err := env.Clientset.RESTClient().Get().AbsPath("/.well-known/openid-configuration").DoRaw(ctx)
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	// Anonymous callers are refused discovery, hence the credentials.
	anonCfg := tlsCfg.Clone()
	anonCfg.Certificates, anonCfg.GetClientCertificate = nil, nil
	anon := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: anonCfg,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, host.Host)
		}}}
	if resp, err := anon.Get(env.Config.Host + "/.well-known/openid-configuration"); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
		// docs/security.md says so; this pins it.
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("anonymous discovery: %s, want 403 (docs/security.md)", resp.Status)
		}
	}
	var disc struct {
		Issuer string `json:"issuer"`
	}
	if err := json.Unmarshal(raw, &disc); err != nil || disc.Issuer == "" {
		t.Fatalf("discovery document %s: %v", raw, err)
	}
	t.Logf("issuer %s", disc.Issuer)

	if _, err := env.Clientset.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mint := func(aud string) string {
		t.Helper()
		exp := int64(600) // TokenRequest's minimum
		tr, err := env.Clientset.CoreV1().ServiceAccounts("default").CreateToken(ctx, "deployer",
			&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{Audiences: []string{aud}, ExpirationSeconds: &exp}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("TokenRequest: %v", err)
		}
		return tr.Status.Token
	}
	newVerifier := func(now func() time.Time) Chain {
		o, err := NewOIDC(OIDCConfig{IssuerURL: disc.Issuer, ClientID: "ate", UsernamePrefix: "-", Client: client, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return Chain{o}
	}
	v := newVerifier(nil)
	good := mint("ate")
	p, err := v.Authenticate(ctx, good)
	if err != nil {
		t.Fatalf("ServiceAccount token: %v", err)
	}
	if p.Name != "system:serviceaccount:default:deployer" {
		t.Errorf("user %q, want system:serviceaccount:default:deployer", p.Name)
	}

	// A token of the same shape and claims from a key the issuer never
	// published: re-sign good's claims.
	is := &issuer{}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	var claims map[string]any
	if err := json.Unmarshal(payload(t, good), &claims); err != nil {
		t.Fatal(err)
	}
	forged := is.sign(t, other, "forged", claims)

	for name, tok := range map[string]string{
		"wrong audience":  mint("someone-else"),
		"wrong signature": forged,
		"malformed":       "eyJhbGciOiJSUzI1NiJ9.e30.AAAA",
	} {
		if _, err := v.Authenticate(ctx, tok); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s: err = %v, want ErrUnauthenticated", name, err)
		}
	}
	// Expiry: the same valid token, checked by a verifier whose clock is
	// past its 10-minute life.
	late := newVerifier(func() time.Time { return time.Now().Add(time.Hour) })
	if _, err := late.Authenticate(ctx, good); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("expired: err = %v, want ErrUnauthenticated", err)
	}
}
