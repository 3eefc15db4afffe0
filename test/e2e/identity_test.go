package e2e

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
	"google.golang.org/grpc"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/netns"
	"substrate.dev/ate/internal/pki"
)

// minted is GET /mint's answer (the counter relays POST /v1/token's).
type minted struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// mint has actor mint a token for aud ("" for the default) from inside
// its sandbox.
func (in *installation) mint(actor, aud string) minted {
	in.t.Helper()
	path := "/mint"
	if aud != "" {
		path += "?aud=" + url.QueryEscape(aud)
	}
	code, body := in.get(actor, path)
	if code != http.StatusOK {
		in.t.Fatalf("GET %s %s = %d %q, want 200 and a token", actor, path, code, body)
	}
	var m minted
	if err := json.Unmarshal([]byte(body), &m); err != nil || m.Token == "" {
		in.t.Fatalf("GET %s %s = %q: %v", actor, path, body, err)
	}
	return m
}

// kidOf is the key id in tok's header.
func kidOf(t *testing.T, tok string) string {
	t.Helper()
	jws, err := jose.ParseSignedCompact(tok, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		t.Fatal(err)
	}
	return jws.Signatures[0].Header.KeyID
}

// identityClaims are the claims beyond go-oidc's IDToken fields.
type identityClaims struct {
	UID      string `json:"uid"`
	Template string `json:"template"`
	JTI      string `json:"jti"`
}

// verify checks tok with go-oidc against provider for aud, optionally at
// a given time, and returns the token and its extra claims.
func verify(ctx context.Context, provider *oidc.Provider, aud, tok string, now func() time.Time) (*oidc.IDToken, identityClaims, error) {
	idt, err := provider.Verifier(&oidc.Config{ClientID: aud, Now: now}).Verify(ctx, tok)
	var c identityClaims
	if err == nil {
		err = idt.Claims(&c)
	}
	return idt, c, err
}

// jwksKids fetches the key ids the JWKS at issuer publishes.
func jwksKids(t *testing.T, issuer string) []string {
	t.Helper()
	res, err := http.Get(issuer + "/openid/v1/jwks")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var set jose.JSONWebKeySet
	if err := json.NewDecoder(res.Body).Decode(&set); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range set.Keys {
		out = append(out, k.KeyID)
	}
	return out
}

// gatewayPost POSTs path to worker's self-service endpoint from its
// outer network namespace, as a request from its sandbox arrives there.
func gatewayPost(t *testing.T, worker, path string) (int, string) {
	t.Helper()
	nsPath := netns.SlotFor(worker).DialNetNSPath
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return netns.DialContext(ctx, nsPath, network, netns.GatewayAddr+":80")
	}}}
	res, err := c.Post("http://"+netns.GatewayAddr+path, "text/plain", nil)
	if err != nil {
		t.Fatalf("POST %s on worker %s's gateway: %v", path, worker, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestActorIdentity: an actor mints a JWT from inside its sandbox; a
// third party verifies it with go-oidc against `ate up`'s discovery
// document and JWKS (sub, uid, template, aud, exp). After the actor moved
// to another worker the token it minted before still verifies until its
// expiry and not after; a new one names the same actor; a self-suspend
// arriving at the old worker's gateway is refused. Keys rotate: the next
// key is published before it signs, and a token of the previous key
// still verifies after the switch.
func TestActorIdentity(t *testing.T) {
	const ttl = 20 * time.Second
	in := startUp(t, 2, "--demo", "--identity-token-ttl", ttl.String(), "--identity-key-rotation", "40s")
	ctx := context.Background()
	issuer := strings.TrimSuffix(in.dashboardURL, "/")
	provider, err := oidc.NewProvider(ctx, issuer)
	if err != nil {
		t.Fatalf("go-oidc discovery at %s: %v", issuer, err)
	}
	for _, name := range []string{"counter-2", "counter-3"} {
		in.ate("create", "actor", name, "--template", "counter")
	}
	in.mustCount("default/counter-1", 1)
	a := in.actor("counter-1")
	first := a.GetWorker()

	// Minted inside, verified outside, default audience and another.
	before := in.mint("default/counter-1", "")
	idt, c, err := verify(ctx, provider, issuer, before.Token, nil)
	if err != nil {
		t.Fatalf("go-oidc rejects the minted token: %v", err)
	}
	if idt.Subject != "actor:default/counter-1" || c.UID != a.GetUid() || c.Template != "counter" || c.JTI == "" {
		t.Errorf("claims sub %q uid %q (actor's %q) template %q jti %q", idt.Subject, c.UID, a.GetUid(), c.Template, c.JTI)
	}
	if life := idt.Expiry.Sub(idt.IssuedAt); life != ttl || !idt.Expiry.Equal(before.ExpiresAt) {
		t.Errorf("exp-iat = %v (want %v), exp %v vs expiresAt %v", life, ttl, idt.Expiry, before.ExpiresAt)
	}
	vault := in.mint("default/counter-1", "https://vault.example")
	if _, _, err := verify(ctx, provider, "https://vault.example", vault.Token, nil); err != nil {
		t.Errorf("token for audience https://vault.example: %v", err)
	}
	if _, _, err := verify(ctx, provider, issuer, vault.Token, nil); err == nil {
		t.Error("a token for https://vault.example verified for the issuer's audience")
	}

	// Move counter-1 to the other worker: counter-2 holds it, counter-3
	// takes counter-1's old one, then counter-2 makes room.
	in.ate("resume", "actor", "counter-2")
	in.ate("suspend", "actor", "counter-1")
	in.ate("resume", "actor", "counter-3")
	in.ate("suspend", "actor", "counter-2")
	in.ate("resume", "actor", "counter-1")
	second := in.actor("counter-1").GetWorker()
	if second == first || second == "" {
		t.Fatalf("counter-1 resumed on worker %q, want another than %q", second, first)
	}
	if _, _, err := verify(ctx, provider, issuer, before.Token, nil); err != nil {
		t.Errorf("the token minted before the move no longer verifies before its expiry: %v", err)
	}
	after := in.mint("default/counter-1", "")
	if idt, c, err := verify(ctx, provider, issuer, after.Token, nil); err != nil || idt.Subject != "actor:default/counter-1" || c.UID != a.GetUid() {
		t.Errorf("token minted after the move: %v, sub %v uid %q", err, idt, c.UID)
	}

	// The old worker's gateway, now counter-3's: a self-suspend there
	// is counter-3's own. Once counter-3 left too, the old worker hosts
	// nothing: refused, and counter-1 runs on.
	in.ate("suspend", "actor", "counter-3")
	if code, body := gatewayPost(t, first, "/v1/suspend"); code != http.StatusConflict {
		t.Errorf("self-suspend at the old worker's gateway = %d %q, want 409", code, body)
	}
	if code, body := gatewayPost(t, first, "/v1/token"); code != http.StatusConflict {
		t.Errorf("token at the old worker's gateway = %d %q, want 409", code, body)
	}
	if a := in.actor("counter-1"); a.GetState() != atev1.ActorState_RUNNING || a.GetWorker() != second {
		t.Errorf("counter-1 is %s on %q after the refused request, want RUNNING on %s", a.GetState(), a.GetWorker(), second)
	}

	// Expiry: go-oidc at exp+1s refuses, and so does the real clock
	// once it passed.
	if _, _, err := verify(ctx, provider, issuer, before.Token, func() time.Time { return before.ExpiresAt.Add(time.Second) }); err == nil {
		t.Error("the token verified one second after its expiry")
	}
	waitFor(t, "the pre-move token's expiry", ttl+10*time.Second, func() bool { return time.Now().After(before.ExpiresAt.Add(time.Second)) })
	if _, _, err := verify(ctx, provider, issuer, before.Token, nil); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("the pre-move token after its expiry: %v, want expired", err)
	}

	// Rotation: the signing key and the next are published; mint until
	// the next key signs; the last token of the previous key verifies
	// and its key is still published beside the new ones.
	oldKid := kidOf(t, after.Token)
	if kids := jwksKids(t, issuer); len(kids) < 2 || !contains(kids, oldKid) {
		t.Fatalf("JWKS %v, want the signing key %s and the next one", kids, oldKid)
	}
	last := after
	var rotated minted
	var tried time.Time
	waitFor(t, "the next key to sign", 60*time.Second, func() bool {
		// At most 4 a second: an actor minting faster than its
		// self-service rate (10 a second after a burst of 50) is
		// answered 429 (security.md, Limits).
		if time.Since(tried) < 250*time.Millisecond {
			return false
		}
		tried = time.Now()
		m := in.mint("default/counter-1", "")
		if kidOf(t, m.Token) == oldKid {
			last = m
			return false
		}
		rotated = m
		return true
	})
	kids := jwksKids(t, issuer)
	if !contains(kids, oldKid) || !contains(kids, kidOf(t, rotated.Token)) {
		t.Errorf("JWKS after the switch %v, want the retired %s and the signing %s", kids, oldKid, kidOf(t, rotated.Token))
	}
	for name, m := range map[string]minted{"the previous key's last": last, "the new key's": rotated} {
		if _, _, err := verify(ctx, provider, issuer, m.Token, nil); err != nil {
			t.Errorf("%s token: %v", name, err)
		}
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// TestActorIdentityRemoteNode: with the API server and the node as
// separate processes the token request crosses the node protocol
// (NodeRegistry.SelfCall) and verifies against the API server's
// --http-addr discovery; a call forwarded for the old assignment after
// the actor moved to the other node is refused (409) and applied to
// neither the moved actor nor the worker's new one.
func TestActorIdentityRemoteNode(t *testing.T) {
	httpAddr := freeAddr(t)
	c := startClusterTimed(t, append(append([]string{}, clusterTiming...), "--http-addr", httpAddr), "n1", "n2")
	in := c.in
	ctx := context.Background()
	issuer := "http://" + httpAddr
	in.createTemplate("test/e2e/testdata/counter.yaml", "counter")
	in.ate("create", "actor", "counter-1", "--template", "counter", "--selector", "node=n1")
	in.mustCount("default/counter-1", 1)
	a := in.actor("counter-1")
	old := a.GetWorker()

	provider, err := oidc.NewProvider(ctx, issuer)
	if err != nil {
		t.Fatalf("go-oidc discovery at %s: %v", issuer, err)
	}
	m := in.mint("default/counter-1", "")
	idt, cl, err := verify(ctx, provider, issuer, m.Token, nil)
	if err != nil || idt.Subject != "actor:default/counter-1" || cl.UID != a.GetUid() {
		t.Fatalf("token minted through node n1: %v (claims %+v)", err, cl)
	}

	// Move: counter-1 to n2, counter-2 onto its old worker on n1.
	in.ate("suspend", "actor", "counter-1")
	if _, err := in.client.UpdateActor(ctx, &atev1.UpdateActorRequest{Atespace: "default", Name: "counter-1",
		WorkerSelector: map[string]string{"node": "n2"}}); err != nil {
		t.Fatal(err)
	}
	in.ate("create", "actor", "counter-2", "--template", "counter", "--selector", "node=n1")
	in.mustCount("default/counter-2", 1)
	in.mustCount("default/counter-1", 2) // its memory moved with it
	if w := in.actor("counter-2").GetWorker(); w != old {
		t.Fatalf("counter-2 on worker %q, want counter-1's old %q", w, old)
	}

	// What node n1 would forward for a request its gateway read before
	// the move: as node n1 (its certificate; the API server lets a node
	// relay only for its own name).
	ca, err := pki.LoadCA(caDir)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	tr := &pki.Transport{Source: tlsSource{cert: leafOf(t, issueCert(t, caDir, "node", "n1")), roots: roots}, TrustDomain: auth.DefaultTrustDomain}
	conn, err := grpc.NewClient(in.apiAddr, tr.DialOption(auth.ComponentAPIServer))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	reg := atev1.NewNodeRegistryClient(conn)
	for _, call := range []string{"suspend", "pause", "token"} {
		resp, err := reg.SelfCall(ctx, &atev1.SelfCallRequest{Node: "n1", Worker: old, ActorUid: a.GetUid(), Call: call})
		if err != nil || resp.GetStatus() != http.StatusConflict {
			t.Errorf("stale %s: %v %d %q, want 409", call, err, resp.GetStatus(), resp.GetAnswer())
		}
	}
	for _, name := range []string{"counter-1", "counter-2"} {
		if st := in.actor(name).GetState(); st != atev1.ActorState_RUNNING {
			t.Errorf("%s is %s after the stale calls, want RUNNING", name, st)
		}
	}
	if _, _, err := verify(ctx, provider, issuer, m.Token, nil); err != nil {
		t.Errorf("the token minted on n1 no longer verifies after the move: %v", err)
	}

	// Its own request through its current worker's gateway on n2 is
	// checked by the API server and done.
	if code, body := in.do(http.MethodPost, "default/counter-1", "/ask?action=suspend", ""); code != http.StatusAccepted {
		t.Fatalf("self-suspend on n2 = %d %q, want 202", code, body)
	}
	waitFor(t, "counter-1 SUSPENDED at its own request", 30*time.Second, func() bool {
		a := in.actor("counter-1")
		return a.GetState() == atev1.ActorState_SUSPENDED && a.GetReason() == atev1.CheckpointReason_SELF_REQUESTED
	})
	if st := in.actor("counter-2").GetState(); st != atev1.ActorState_RUNNING {
		t.Errorf("counter-2 is %s after counter-1's self-suspend, want RUNNING", st)
	}
}
