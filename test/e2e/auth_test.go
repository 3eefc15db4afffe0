package e2e

import (
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/ateconfig"
)

// TestAPIAuthentication runs `ate apiserver` with a static token file and
// a policy file and drives it as its users would: through the CLI (role
// bindings created, listed and deleted; a viewer's and an editor's view)
// and through gRPC with every kind of bad token. Nothing a refused call
// asked for happens.
func TestAPIAuthentication(t *testing.T) {
	dir := t.TempDir()
	const admin, vera, eddie = "e2e-admin-token-0000000000", "e2e-vera-token-0000000000", "e2e-eddie-token-0000000000"
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(admin+",root,0,\"ate:admins\"\n"+vera+",vera,1\n"+eddie+",eddie,2,\"devs\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte("- name: vera-views-a\n  atespace: a\n  role: viewer\n  users: [vera]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, fields := startComponent(t, "apiserver", "ate apiserver ready", "apiserver", "--data-dir", filepath.Join(dir, "api"),
		"--listen", "127.0.0.1:0", "--token-auth-file", tokens, "--authorization-policy-file", policy)
	addr := fields["api"].(string)
	in := &installation{t: t, dataDir: filepath.Join(dir, "cli"), apiAddr: addr}
	// Over TLS (the harness gives the API server a --tls-dir from caDir):
	// users present no certificate, only their tokens.
	asAdmin := clusterClientConfig(addr)
	asAdmin.Token = admin
	if err := ateconfig.Write(filepath.Join(in.dataDir, "config.yaml"), asAdmin); err != nil {
		t.Fatal(err)
	}

	in.ate("create", "atespace", "a")
	in.ate("create", "atespace", "b")
	if out := in.ate("create", "rolebinding", "devs-edit-a", "--role", "editor", "-n", "a", "--group", "devs"); !strings.Contains(out, "rolebinding devs-edit-a created (editor in atespace a)") {
		t.Errorf("create rolebinding: %q", out)
	}
	out := in.ate("get", "rolebindings")
	if !strings.Contains(out, "devs-edit-a") || !strings.Contains(out, "editor") || !strings.Contains(out, "devs") {
		t.Errorf("get rolebindings:\n%s", out)
	}

	asUser := func(tok string, args ...string) (string, error) { return in.ateErr(append(args, "--token", tok)...) }
	for _, tok := range []string{vera, eddie} {
		out, err := asUser(tok, "get", "atespaces")
		if err != nil || !strings.Contains(out, "a ") || strings.Contains(out, "b ") || strings.Contains(out, "default") {
			t.Errorf("get atespaces as a's user: %v\n%s\nwant a only", err, out)
		}
	}
	if out, err := asUser(vera, "create", "atespace", "c"); err == nil || !strings.Contains(out, "vera may not create atespace") {
		t.Errorf("viewer creates an atespace: %v\n%s", err, out)
	}
	if out, err := asUser(eddie, "get", "rolebindings"); err == nil || !strings.Contains(out, "may not list rolebindings") {
		t.Errorf("editor lists role bindings: %v\n%s", err, out)
	}
	if out, err := asUser("no-such-token", "get", "atespaces"); err == nil || !strings.Contains(out, "authentication required") {
		t.Errorf("unknown token: %v\n%s", err, out)
	}

	ctx := context.Background()
	dial := func(tok string) atev1.ControlClient {
		c := clusterClientConfig(addr)
		c.Token = tok
		conn, err := grpc.NewClient(addr, dialOptions(t, c)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return atev1.NewControlClient(conn)
	}
	for name, c := range map[string]struct {
		client atev1.ControlClient
		ctx    context.Context
	}{
		"none":       {dial(""), ctx},
		"malformed":  {dial(""), metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer")},
		"not bearer": {dial(""), metadata.AppendToOutgoingContext(ctx, "authorization", "Basic cm9vdDpwdw==")},
		"unknown":    {dial("guess"), ctx},
		"bad jwt":    {dial("eyJhbGciOiJSUzI1NiJ9.e30.c2ln"), ctx},
	} {
		if _, err := c.client.DeleteAtespace(c.ctx, &atev1.DeleteAtespaceRequest{Name: "b"}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s token: DeleteAtespace = %v, want UNAUTHENTICATED", name, err)
		}
		if _, err := c.client.CreateAtespace(c.ctx, &atev1.CreateAtespaceRequest{Name: "c"}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s token: CreateAtespace = %v, want UNAUTHENTICATED", name, err)
		}
	}
	// Valid for a, used on b: NOT_FOUND, exactly as an absent atespace.
	_, absent := dial(admin).GetAtespace(ctx, &atev1.GetAtespaceRequest{Name: "zz"})
	_, hidden := dial(eddie).GetAtespace(ctx, &atev1.GetAtespaceRequest{Name: "b"})
	if status.Code(hidden) != codes.NotFound || status.Convert(hidden).Message() != strings.ReplaceAll(status.Convert(absent).Message(), "zz", "b") {
		t.Errorf("editor of a gets atespace b: %v; want NOT_FOUND as an absent one (%v)", hidden, absent)
	}
	if _, err := dial(vera).CreateActor(ctx, &atev1.CreateActorRequest{Actor: &atev1.Actor{Atespace: "a", Name: "x", Template: "t"}}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("viewer of a creates an actor there: %v, want PERMISSION_DENIED", err)
	}
	if _, err := dial(eddie).CreateActor(ctx, &atev1.CreateActorRequest{Actor: &atev1.Actor{Atespace: "b", Name: "x", Template: "t"}}); status.Code(err) != codes.NotFound {
		t.Errorf("editor of a creates an actor in b: %v, want NOT_FOUND", err)
	}
	// Nothing the refused calls asked for happened.
	list, err := dial(admin).ListAtespaces(ctx, &atev1.ListAtespacesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ns := range list.GetAtespaces() {
		got = append(got, ns.GetName())
	}
	if strings.Join(got, ",") != "a,b,default" {
		t.Errorf("atespaces after refused calls: %v, want a, b, default", got)
	}
	if actors, err := dial(admin).ListActors(ctx, &atev1.ListActorsRequest{}); err != nil || len(actors.GetActors()) != 0 {
		t.Errorf("actors after refused calls: %v, %v; want none", actors, err)
	}

	// Deleting the binding takes eddie's rights at once.
	if out := in.ate("delete", "rolebinding", "devs-edit-a"); !strings.Contains(out, "rolebinding devs-edit-a deleted") {
		t.Errorf("delete rolebinding: %q", out)
	}
	if _, err := dial(eddie).GetAtespace(ctx, &atev1.GetAtespaceRequest{Name: "a"}); status.Code(err) != codes.NotFound {
		t.Errorf("after the binding's deletion eddie gets a: %v, want NOT_FOUND", err)
	}
	if out, err := in.ateErr("delete", "rolebinding", "devs-edit-a"); err == nil || !strings.Contains(out, "not found") {
		t.Errorf("deleting it again: %v\n%s", err, out)
	}
}

// TestUpAdminToken: `ate up` makes <data-dir>/admin-token (0600) and
// writes it into the client config (0600); the API refuses calls without
// it; the dashboard asks for a token and acts with the one it is given.
func TestUpAdminToken(t *testing.T) {
	in := startUp(t, 1)
	for _, name := range []string{"admin-token", "config.yaml"} {
		fi, err := os.Stat(filepath.Join(in.dataDir, name))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v; want 0600", name, err, fi.Mode().Perm())
		}
	}
	tok, err := os.ReadFile(filepath.Join(in.dataDir, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ateconfig.Load(filepath.Join(in.dataDir, "config.yaml"))
	if err != nil || cfg.Token != strings.TrimSpace(string(tok)) {
		t.Fatalf("client config %+v, %v: want the admin token", cfg, err)
	}
	// Over the same TLS (the config's CA) but without the token.
	noToken := cfg
	noToken.Token = ""
	conn, err := grpc.NewClient(in.apiAddr, dialOptions(t, noToken)...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := atev1.NewControlClient(conn).ListActors(context.Background(), &atev1.ListActorsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("ListActors without a token: %v, want UNAUTHENTICATED", err)
	}
	if out := in.ate("get", "atespaces"); !strings.Contains(out, "default") {
		t.Errorf("ate get atespaces with the config's token:\n%s", out)
	}

	// The dashboard: no token, the form; a wrong one refused; the admin
	// token kept in an HttpOnly cookie that then shows the page.
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar}
	resp, err := hc.Get(in.dashboardURL)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	if !strings.HasSuffix(resp.Request.URL.Path, "/login") || !strings.Contains(body, `name="token"`) {
		t.Fatalf("dashboard without a token: %s %s, want the sign-in form", resp.Request.URL, resp.Status)
	}
	login := func(token string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, strings.TrimSuffix(in.dashboardURL, "/")+"/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if resp := login("wrong"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("dashboard login with a wrong token: %s, want 401", resp.Status)
	}
	resp = login(cfg.Token)
	body = readAll(t, resp)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="actors"`) {
		t.Errorf("dashboard after login: %s\n%.400s", resp.Status, body)
	}
}
