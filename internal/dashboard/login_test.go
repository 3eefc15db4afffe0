package dashboard

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

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
	req := httptest.NewRequest(http.MethodPost, "/actors/default/a/suspend", nil)
	req.AddCookie(ck)
	h.ServeHTTP(httptest.NewRecorder(), req)
	if _, auth := c.recorded(); len(auth) != 1 || auth[0] != "Bearer good" {
		t.Errorf("action's authorization %q, want the cookie's token", auth)
	}
}
