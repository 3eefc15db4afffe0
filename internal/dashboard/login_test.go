package dashboard

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// ListAtespaces accepts the token "good" only, as an API would.
func (f *fakeControl) ListAtespaces(ctx context.Context, _ *atev1.ListAtespacesRequest, _ ...grpc.CallOption) (*atev1.ListAtespacesResponse, error) {
	md, _ := metadata.FromOutgoingContext(ctx)
	if strings.Join(md.Get("authorization"), ",") != "Bearer good" {
		return nil, status.Error(codes.Unauthenticated, "no")
	}
	return &atev1.ListAtespacesResponse{}, nil
}

// TestLogin: with RequireLogin the page sends a visitor without a token to
// the form; a token the API refuses is not kept; an accepted one lands in
// an HttpOnly, SameSite=Strict cookie that every action then carries.
func TestLogin(t *testing.T) {
	c := &fakeControl{}
	h, err := New(Config{Control: c, RequireLogin: true})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusSeeOther || !strings.HasSuffix(rec.Header().Get("Location"), "login") {
		t.Fatalf("GET / without a token: %d to %q, want 303 to login", rec.Code, rec.Header().Get("Location"))
	}
	if code, body := get(t, h, "/login"); code != http.StatusOK || !strings.Contains(body, `name="token"`) {
		t.Fatalf("GET /login: %d, form missing", code)
	}
	if code, _ := get(t, h, "/content"); code != http.StatusUnauthorized {
		t.Fatalf("GET /content without a token: %d, want 401", code)
	}
	post := func(tok string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"token": {tok}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := post("bad"); rec.Code != http.StatusUnauthorized || len(rec.Result().Cookies()) != 0 {
		t.Fatalf("POST /login bad token: %d, cookies %v; want 401 and none", rec.Code, rec.Result().Cookies())
	}
	rec = post("good")
	cookies := rec.Result().Cookies()
	if rec.Code != http.StatusSeeOther || len(cookies) != 1 {
		t.Fatalf("POST /login good token: %d, cookies %v", rec.Code, cookies)
	}
	ck := cookies[0]
	if ck.Name != TokenCookie || ck.Value != "good" || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode {
		t.Fatalf("cookie %+v: want %s=good, HttpOnly, SameSite=Strict", ck, TokenCookie)
	}
	// A browser left signed in forgets the token.
	if ck.MaxAge <= 0 || ck.MaxAge > int(CookieTTL/time.Second) || ck.Expires.IsZero() || time.Until(ck.Expires) > CookieTTL {
		t.Fatalf("cookie Max-Age %d, Expires %v: want at most %s", ck.MaxAge, ck.Expires, CookieTTL)
	}
	req := httptest.NewRequest(http.MethodPost, "/actors/default/a/suspend", nil)
	req.AddCookie(ck)
	h.ServeHTTP(httptest.NewRecorder(), req)
	if _, auth := c.recorded(); len(auth) != 1 || auth[0] != "Bearer good" {
		t.Errorf("action's authorization %q, want the cookie's token", auth)
	}
}

// TestLoginOverTLS: over HTTPS the token cookie is __Host- prefixed
// (Secure, Path=/, no Domain: only this host may set it), and a plain
// ate_token cookie, which a sibling subdomain could have planted, is not
// sent on to the API as the caller's token there.
func TestLoginOverTLS(t *testing.T) {
	c := &fakeControl{}
	h, err := New(Config{Control: c, RequireLogin: true})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "https://dash.example/login", strings.NewReader(url.Values{"token": {"good"}}.Encode()))
	req.TLS = &tls.ConnectionState{}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	cookies := rec.Result().Cookies()
	if rec.Code != http.StatusSeeOther || len(cookies) != 1 {
		t.Fatalf("POST /login over TLS: %d, cookies %v", rec.Code, cookies)
	}
	if ck := cookies[0]; ck.Name != SecureTokenCookie || !ck.Secure || ck.Path != "/" || ck.Domain != "" || !ck.HttpOnly || ck.MaxAge <= 0 {
		t.Fatalf("cookie over TLS %+v: want %s, Secure, Path=/, no Domain, HttpOnly, expiring", ck, SecureTokenCookie)
	}

	planted := httptest.NewRequest(http.MethodPost, "https://dash.example/actors/default/a/suspend", nil)
	planted.TLS = &tls.ConnectionState{}
	planted.AddCookie(&http.Cookie{Name: TokenCookie, Value: "good"})
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, planted)
	// The API sees the call without the planted token (and, checking
	// tokens, refuses it).
	if _, auth := c.recorded(); slices.Contains(auth, "Bearer good") {
		t.Errorf("a plain %s cookie over TLS was sent on as the caller's token: %q", TokenCookie, auth)
	}
}
