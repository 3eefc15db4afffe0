package apiserver

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/store"
)

// fakeAuthn accepts "jwt-<name>" as user <name>.
type fakeAuthn struct{}

func (fakeAuthn) Authenticate(_ context.Context, token string) (*auth.Principal, error) {
	name, ok := strings.CutPrefix(token, "jwt-")
	if !ok {
		return nil, errors.New("not a token of ours")
	}
	return &auth.Principal{Name: name}, nil
}

// TestIngressTokens: create returns the secret once and stores its hash
// only; list has no secrets; review accepts a token for its own atespace
// only, refuses unknown, deleted and (without an authenticator) other
// tokens as allowed=false, and with one consults its authorizer; bad
// requests are INVALID_ARGUMENT.
func TestIngressTokens(t *testing.T) {
	ctx := context.Background()
	st, must := openBolt(t)
	must(st.CreateAtespace(ctx, &store.Atespace{Name: "default"}))
	must(st.CreateAtespace(ctx, &store.Atespace{Name: "other"}))
	s := New(st, nil, "gvisor", nil, nil)

	tok, err := s.CreateIngressToken(ctx, &atev1.CreateIngressTokenRequest{Atespace: "default", Name: "web"})
	must(err)
	if !auth.IsIngressToken(tok.GetToken()) || len(tok.GetToken()) < 40 {
		t.Fatalf("token %q: want a long ingress token", tok.GetToken())
	}
	stored, err := st.ListIngressTokens(ctx, "default")
	must(err)
	if len(stored) != 1 || stored[0].Hash != auth.HashToken(tok.GetToken()) || strings.Contains(stored[0].Hash, tok.GetToken()) {
		t.Fatalf("stored %+v: want the token's hash only", stored)
	}
	list, err := s.ListIngressTokens(ctx, &atev1.ListIngressTokensRequest{})
	must(err)
	if len(list.GetTokens()) != 1 || list.GetTokens()[0].GetToken() != "" || list.GetTokens()[0].GetName() != "web" {
		t.Fatalf("ListIngressTokens = %v: want web without its secret", list)
	}
	_, err = s.CreateIngressToken(ctx, &atev1.CreateIngressTokenRequest{Atespace: "default", Name: "web"})
	if status.Code(err) != codes.AlreadyExists {
		t.Fatalf("duplicate create: %v, want AlreadyExists", err)
	}
	for _, tc := range []struct {
		req  *atev1.CreateIngressTokenRequest
		code codes.Code
	}{
		{&atev1.CreateIngressTokenRequest{Atespace: "nowhere", Name: "x"}, codes.NotFound},
		{&atev1.CreateIngressTokenRequest{Atespace: "default", Name: "Bad_Name"}, codes.InvalidArgument},
		{&atev1.CreateIngressTokenRequest{Atespace: "", Name: "x"}, codes.InvalidArgument},
	} {
		if _, err := s.CreateIngressToken(ctx, tc.req); status.Code(err) != tc.code {
			t.Errorf("CreateIngressToken(%v): %v, want %v", tc.req, err, tc.code)
		}
	}

	review := func(atespace, token string) (*atev1.ReviewIngressTokenResponse, error) {
		return s.ReviewIngressToken(ctx, &atev1.ReviewIngressTokenRequest{Atespace: atespace, Token: token})
	}
	cases := []struct {
		name, atespace, token string
		allowed               bool
		subject               string
		code                  codes.Code
	}{
		{"right", "default", tok.GetToken(), true, "ingresstoken:default/web", codes.OK},
		{"other atespace", "other", tok.GetToken(), false, "", codes.OK},
		{"wrong", "default", auth.NewIngressToken(), false, "", codes.OK},
		{"jwt without authenticator", "default", "jwt-alice", false, "", codes.OK},
		{"empty", "default", "", false, "", codes.InvalidArgument},
		{"huge", "default", strings.Repeat("x", maxBearerBytes+1), false, "", codes.InvalidArgument},
		{"bad atespace", "No", tok.GetToken(), false, "", codes.InvalidArgument},
	}
	for _, tc := range cases {
		got, err := review(tc.atespace, tc.token)
		if status.Code(err) != tc.code || got.GetAllowed() != tc.allowed || got.GetSubject() != tc.subject {
			t.Errorf("%s: review = %v, %v; want allowed %v subject %q code %v", tc.name, got, err, tc.allowed, tc.subject, tc.code)
		}
	}

	s.SetIngressAuthenticator(fakeAuthn{}, func(_ context.Context, p *auth.Principal, atespace string) error {
		if p.Name == "alice" && atespace == "default" {
			return nil
		}
		return errors.New("no role binding")
	})
	for _, tc := range []struct {
		atespace, token string
		allowed         bool
	}{
		{"default", "jwt-alice", true},
		{"other", "jwt-alice", false},
		{"default", "jwt-bob", false},
		{"default", "garbage", false},
		{"default", tok.GetToken(), true},
	} {
		got, err := review(tc.atespace, tc.token)
		if err != nil || got.GetAllowed() != tc.allowed {
			t.Errorf("with authenticator: review(%s, %s) = %v, %v; want allowed %v", tc.atespace, tc.token, got, err, tc.allowed)
		}
	}

	_, err = s.DeleteIngressToken(ctx, &atev1.DeleteIngressTokenRequest{Atespace: "default", Name: "web"})
	must(err)
	if got, err := review("default", tok.GetToken()); err != nil || got.GetAllowed() {
		t.Errorf("deleted token: review = %v, %v; want not allowed", got, err)
	}
	if _, err := s.DeleteIngressToken(ctx, &atev1.DeleteIngressTokenRequest{Atespace: "default", Name: "web"}); status.Code(err) != codes.NotFound {
		t.Errorf("second delete: %v, want NotFound", err)
	}
}
