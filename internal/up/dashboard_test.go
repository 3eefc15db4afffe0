package up

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/pki"
)

// TestAPIServerServesDashboard: `ate apiserver --http-addr` serves the
// dashboard, whose reads and actions reach the real Control API (a
// suspend of an actor that does not exist comes back as the API's
// NotFound), and stops with the server.
func TestAPIServerServesDashboard(t *testing.T) {
	// A free port, so the test knows the dashboard's address up front.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := ln.Addr().String()
	ln.Close()

	// Over mutual TLS: the dashboard dials its own server as the API
	// server component.
	ca, err := pki.NewCA("", 0)
	if err != nil {
		t.Fatal(err)
	}
	tlsDir := pki.Settings{Dir: t.TempDir()}
	if _, err := ca.IssueToDir(pki.LeafRequest{Identity: auth.Identity{Component: auth.ComponentAPIServer, Name: "api"}}, tlsDir.Dir); err != nil {
		t.Fatal(err)
	}
	// With TLS on the API server needs an authenticator; the dashboard
	// acts with the token its user gives (here as a header, as a script
	// would; a browser's sign-in cookie is TestUpAdminToken's).
	const token = "dashboard-test-admin-token-0123456789"
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte(token+",root,1,\"ate:admins\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- RunAPIServer(ctx, APIServerConfig{DataDir: t.TempDir(), Addr: "127.0.0.1:0", HTTPAddr: httpAddr,
			SandboxClass: "fake", TLS: tlsDir, Auth: auth.Config{TokenAuthFile: tokens}, Ready: func(addr string) { ready <- addr }})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("apiserver stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("apiserver not ready after 30s")
	}

	client := &http.Client{Timeout: 10 * time.Second, Transport: bearerTransport{token}}
	resp, err := client.Get("http://" + httpAddr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	page := string(body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET / = %d\n%s", resp.StatusCode, page)
	}
	for _, want := range []string{"No actors.", "No nodes registered.", "Resume (lifecycle", "no activations yet"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, "Activation wait") {
		t.Error("the apiserver's dashboard charts the router's activation wait, which it does not record")
	}
	if strings.Contains(page, "Could not list") {
		t.Errorf("a section failed to load:\n%s", page)
	}

	resp, err = client.Post("http://"+httpAddr+"/actors/default/nobody/suspend", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var res struct{ Error string }
	err = json.NewDecoder(resp.Body).Decode(&res)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusNotFound || !strings.Contains(res.Error, "nobody") {
		t.Errorf("suspend of a missing actor = %d %+v (%v), want 404 naming it", resp.StatusCode, res, err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("apiserver: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("apiserver did not stop within 30s")
	}
	if _, err := client.Get("http://" + httpAddr + "/"); err == nil {
		t.Error("the dashboard still answers after the server stopped")
	}
}

// bearerTransport sends "Authorization: Bearer token" with every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}
