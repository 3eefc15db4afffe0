package identity

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/store"
)

// hostedActor seeds s with actor default/a (uid uid-a, template tpl)
// RUNNING on worker w1, and worker w2 free.
func hostedActor(t *testing.T, s store.Store) *store.Actor {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.CreateAtespace(ctx, &store.Atespace{Name: "default", UID: "ns-1"}))
	must(s.CreateTemplate(ctx, &store.Template{Atespace: "default", Name: "tpl", UID: "t-1", Phase: store.TemplateReady,
		Spec: &atev1.ActorTemplateSpec{Containers: []*atev1.ContainerSpec{{Name: "c", Image: "oci:/x"}}}}))
	a := &store.Actor{Atespace: "default", Name: "a", UID: "uid-a", Template: "tpl", Lifecycle: store.Lifecycle{State: store.Suspended}}
	must(s.CreateActor(ctx, a))
	must(s.PutWorker(ctx, &store.Worker{Name: "w1", Node: "n", Labels: map[string]string{"w": "1"}}))
	must(s.PutWorker(ctx, &store.Worker{Name: "w2", Node: "n", Labels: map[string]string{"w": "2"}}))
	a, err := s.GetActor(ctx, a.Key())
	must(err)
	a.WorkerSelector = map[string]string{"w": "1"}
	a, _, err = s.ClaimWorker(ctx, a, "")
	must(err)
	a.State = store.Running
	a, err = s.UpdateActor(ctx, a)
	must(err)
	return a
}

// TestMintVerifiesWithOIDC: a minted token verifies with go-oidc pointed
// at the issuer's discovery document, with the claims the docs promise;
// after the actor moved, the old worker's request mints nothing.
func TestMintVerifiesWithOIDC(t *testing.T) {
	ctx := context.Background()
	s, _ := backends[0].open(t)
	act := hostedActor(t, s)
	iss := New(s, "", Config{TokenTTL: 3 * time.Minute})
	srv := httptest.NewServer(iss.Handler())
	defer srv.Close()

	if _, err := iss.Mint(ctx, "w1", act.UID, ""); !errors.Is(err, ErrNoIssuer) {
		t.Fatalf("Mint without an issuer URL: %v, want ErrNoIssuer", err)
	}
	iss.SetIssuerURL(srv.URL)
	provider, err := oidc.NewProvider(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, body string
		err        error // nil: minted
		aud        string
	}{
		{"default audience", ``, nil, srv.URL},
		{"empty object", `{}`, nil, srv.URL},
		{"audience", `{"audience": "https://vault.example"}`, nil, "https://vault.example"},
		{"unknown field", `{"aud": "x"}`, ErrInvalid, ""},
		{"not JSON", `aud=x`, ErrInvalid, ""},
		{"audience too long", `{"audience": "` + strings.Repeat("a", MaxAudience+1) + `"}`, ErrInvalid, ""},
		{"control character", `{"audience": "a\nb"}`, ErrInvalid, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := iss.MintSelf(ctx, "w1", act.UID, []byte(tc.body))
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("MintSelf = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("MintSelf: %v", err)
			}
			idt, err := provider.Verifier(&oidc.Config{ClientID: tc.aud}).Verify(ctx, tok.Token)
			if err != nil {
				t.Fatalf("go-oidc: %v", err)
			}
			var c struct {
				UID      string `json:"uid"`
				Template string `json:"template"`
				JTI      string `json:"jti"`
			}
			if err := idt.Claims(&c); err != nil {
				t.Fatal(err)
			}
			if idt.Subject != "actor:default/a" || c.UID != act.UID || c.Template != "tpl" || c.JTI == "" || idt.Issuer != srv.URL {
				t.Errorf("claims sub %q uid %q template %q jti %q iss %q", idt.Subject, c.UID, c.Template, c.JTI, idt.Issuer)
			}
			if d := idt.Expiry.Sub(idt.IssuedAt); d != 3*time.Minute || !idt.Expiry.Equal(tok.ExpiresAt) {
				t.Errorf("exp - iat = %v, expiresAt %v vs exp %v; want 3m and equal", d, tok.ExpiresAt, idt.Expiry)
			}
			// Another audience does not accept it; nor does anyone after
			// its expiry.
			if _, err := provider.Verifier(&oidc.Config{ClientID: "someone-else"}).Verify(ctx, tok.Token); err == nil {
				t.Error("a verifier for another audience accepted the token")
			}
			late := provider.Verifier(&oidc.Config{ClientID: tc.aud, Now: func() time.Time { return tok.ExpiresAt.Add(time.Second) }})
			if _, err := late.Verify(ctx, tok.Token); err == nil {
				t.Error("the token verified after its expiry")
			}
		})
	}

	// Not hosted: another uid, an unknown or free worker, and the actor
	// after it moved to w2 (asked through w1, its old worker).
	for _, tc := range []struct{ worker, uid string }{{"w1", "uid-other"}, {"w9", act.UID}, {"w2", act.UID}, {"w1", ""}} {
		if _, err := iss.MintSelf(ctx, tc.worker, tc.uid, nil); !errors.Is(err, nodeapi.ErrNotHosted) {
			t.Errorf("MintSelf(%s, %q) = %v, want ErrNotHosted", tc.worker, tc.uid, err)
		}
	}
	moved := *act
	moved.State, moved.Worker = store.Suspended, ""
	a, err := s.UpdateActor(ctx, &moved)
	if err != nil {
		t.Fatal(err)
	}
	a.WorkerSelector = map[string]string{"w": "2"}
	if a, _, err = s.ClaimWorker(ctx, a, ""); err != nil {
		t.Fatal(err)
	}
	a.State = store.Running
	if _, err := s.UpdateActor(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := iss.Mint(ctx, "w1", act.UID, ""); !errors.Is(err, nodeapi.ErrNotHosted) {
		t.Errorf("Mint through the old worker after the move: %v, want ErrNotHosted", err)
	}
	if _, err := iss.Mint(ctx, "w2", act.UID, ""); err != nil {
		t.Errorf("Mint through the new worker: %v", err)
	}
}

// TestDiscoveryDocument: the fields OpenID Connect Discovery 1.0
// requires, and the JWKS at jwks_uri; an issuer URL with a path serves
// below it.
func TestDiscoveryDocument(t *testing.T) {
	s, _ := backends[0].open(t)
	iss := New(s, "", Config{})
	srv := httptest.NewServer(iss.Handler())
	defer srv.Close()
	iss.SetIssuerURL(srv.URL + "/ate/")
	res, err := http.Get(srv.URL + "/ate" + DiscoveryPath)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var d Discovery
	if err := json.NewDecoder(res.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	if d.Issuer != srv.URL+"/ate" || d.JWKSURI != srv.URL+"/ate"+JWKSPath || len(d.ResponseTypesSupported) == 0 ||
		len(d.SubjectTypesSupported) == 0 || len(d.IDTokenSigningAlgValuesSupported) != 1 || d.IDTokenSigningAlgValuesSupported[0] != "ES256" {
		t.Errorf("discovery = %+v", d)
	}
	res2, err := http.Get(d.JWKSURI)
	if err != nil {
		t.Fatal(err)
	}
	defer res2.Body.Close()
	var set struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.NewDecoder(res2.Body).Decode(&set); err != nil {
		t.Fatal(err)
	}
	if len(set.Keys) != 2 || set.Keys[0]["kty"] != "EC" || set.Keys[0]["alg"] != "ES256" || set.Keys[0]["d"] != nil {
		t.Errorf("JWKS = %v, want two public EC keys", set.Keys)
	}
	res3, err := http.Get(srv.URL + DiscoveryPath)
	if err != nil {
		t.Fatal(err)
	}
	_ = res3.Body.Close()
	if res3.StatusCode != http.StatusNotFound {
		t.Errorf("discovery outside the issuer's path: %d, want 404", res3.StatusCode)
	}
}
