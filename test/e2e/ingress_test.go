package e2e

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// TestRouterIngressToken: an actor whose template says ingress: {policy:
// token} is reached only with an ingress token of its atespace. An
// anonymous request, a wrong token and another atespace's token are
// answered 401 with a Bearer challenge and leave the SUSPENDED actor
// as it was (its resume count unchanged); the right token resumes it;
// once the token is deleted, the router refuses it within its review
// cache's TTL (10 s). A user's API bearer token (a static token here) is
// refused (nothing resumed) even when the user holds a role in the
// actor's atespace: only ingress tokens and JWTs with the ingress
// audience open actors, never a credential for the API.
func TestRouterIngressToken(t *testing.T) {
	dir := t.TempDir()
	const vera, otto = "e2e-vera-token-0123456789", "e2e-otto-token-0123456789"
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(vera+",vera,1\n"+otto+",otto,2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte("- {name: vera-views-default, atespace: default, role: viewer, users: [vera]}\n"+
		"- {name: otto-edits-other, atespace: other, role: editor, users: [otto]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	in := startUp(t, 1, "--token-auth-file", tokens, "--authorization-policy-file", policy)
	in.counterTemplate("locked", nil, "ingress: {policy: token}\n")
	in.ate("create", "atespace", "other")
	in.ate("create", "actor", "locked-1", "--template", "locked")
	token := lastLine(in.ate("create", "ingresstoken", "web"))
	elsewhere := lastLine(in.ate("create", "ingresstoken", "web", "-n", "other"))
	if !strings.HasPrefix(token, "ate_it_") || token == elsewhere {
		t.Fatalf("tokens %q and %q: want two distinct ingress tokens", token, elsewhere)
	}
	if out := in.ate("get", "ingresstokens"); !strings.Contains(out, "default/web") || strings.Contains(out, token) {
		t.Fatalf("ate get ingresstokens:\n%s\nwant default/web listed without its token", out)
	}

	adminFile, err := os.ReadFile(filepath.Join(in.dataDir, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	admin := strings.TrimSpace(string(adminFile))

	send := func(bearer string) (int, http.Header, string) {
		t.Helper()
		req := in.newRequest(t.Context(), http.MethodGet, "default/locked-1", "/", nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Header, string(b)
	}
	untouched := func(what string) {
		t.Helper()
		a := in.actor("locked-1")
		if a.GetResumes() != 0 || a.GetState() != atev1.ActorState_SUSPENDED {
			t.Fatalf("after %s: actor %s with %d resumes, want SUSPENDED with 0", what, a.GetState(), a.GetResumes())
		}
	}
	for _, tc := range []struct {
		name, bearer, challenge string
	}{
		{"anonymous", "", `Bearer realm="ate"`},
		{"wrong token", "ate_it_" + strings.Repeat("A", 43), `Bearer realm="ate", error="invalid_token"`},
		{"another atespace's token", elsewhere, `Bearer realm="ate", error="invalid_token"`},
		{"another atespace's editor", otto, `Bearer realm="ate", error="invalid_token"`},
		{"an API token of a viewer of the atespace", vera, `Bearer realm="ate", error="invalid_token"`},
		{"the admin token", admin, `Bearer realm="ate", error="invalid_token"`},
	} {
		code, hdr, body := send(tc.bearer)
		if code != http.StatusUnauthorized || hdr.Get("WWW-Authenticate") != tc.challenge {
			t.Fatalf("%s: %d %q (WWW-Authenticate %q), want 401 with %q", tc.name, code, body, hdr.Get("WWW-Authenticate"), tc.challenge)
		}
		untouched(tc.name)
	}

	code, hdr, body := send(token)
	if code != http.StatusOK || strings.TrimSpace(body) != "count=1" || hdr.Get("Ate-Activation") != "resumed" {
		t.Fatalf("with the token: %d %q (%s), want 200 count=1 resumed", code, body, hdr.Get("Ate-Activation"))
	}
	if a := in.actor("locked-1"); a.GetResumes() != 1 || a.GetState() != atev1.ActorState_RUNNING {
		t.Fatalf("after the token's request: %s with %d resumes, want RUNNING with 1", a.GetState(), a.GetResumes())
	}
	if code, _, body := send(""); code != http.StatusUnauthorized {
		t.Fatalf("anonymous to the running actor: %d %q, want 401", code, body)
	}
	if code, _, body := send(vera); code != http.StatusUnauthorized {
		t.Fatalf("the API token of a viewer of default, to the running actor: %d %q, want 401", code, body)
	}

	in.ate("delete", "ingresstoken", "web")
	deleted := time.Now()
	// The router may have the token's review cached for its TTL (10 s).
	waitFor(t, "the deleted token to be refused", 30*time.Second, func() bool {
		code, _, _ := send(token)
		return code == http.StatusUnauthorized
	})
	if d := time.Since(deleted); d > 12*time.Second {
		t.Errorf("the deleted token was accepted for %s, want at most the 10 s cache TTL", d)
	}
}

// lastLine is the last non-empty line of out (ate's combined output puts
// notes on stderr before the value).
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
