package image

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestEnsureRegistry pushes a packed image to an in-process OCI
// distribution server on 127.0.0.1 (plain HTTP, as go-containerregistry
// uses for loopback registries) and unpacks it by tag and by digest.
func TestEnsureRegistry(t *testing.T) {
	host := serveRegistry(t, func(h http.Handler) http.Handler { return h })

	src, out := packed(t, CompressionGzip)
	img, _ := onlyImage(t, out)
	tag, err := name.NewTag(host + "/counter:latest")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}

	c := NewCache(t.TempDir(), nil)
	ctx := context.Background()
	got, err := c.Ensure(ctx, host+"/counter:latest")
	if err != nil {
		t.Fatal(err)
	}
	if want := layoutDigest(t, out); got.Digest != want {
		t.Errorf("digest %s, pushed %s", got.Digest, want)
	}
	compareTrees(t, expectedTree(t, src, "/"), snapshot(t, got.RootFS))

	byDigest, err := c.Ensure(ctx, "docker://"+host+"/counter@"+got.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if byDigest.RootFS != got.RootFS || c.unpacks.Load() != 1 {
		t.Errorf("by digest: %s after %d unpacks, want the cached %s", byDigest.RootFS, c.unpacks.Load(), got.RootFS)
	}

	if _, err := c.Ensure(ctx, host+"/missing:latest"); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("unknown repository: %v, want an error naming it", err)
	}
}

// TestRegistryCredentialsPerAtespace is a tenant naming a private image:
// its pulls use only its own atespace's credentials, never the
// machine's Docker login (which here could read everything) nor another
// atespace's.
func TestRegistryCredentialsPerAtespace(t *testing.T) {
	// The registry lets "ops" read and write everything and "team-a"
	// read its own repository only; anyone else is refused.
	users := map[string]string{"ops": "ops-secret", "team-a": "a-secret"}
	var mu sync.Mutex
	seen := map[string]bool{} // users whose requests the registry answered
	host := serveRegistry(t, func(reg http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u, p, ok := r.BasicAuth()
			if !ok || users[u] != p || (u != "ops" && r.URL.Path != "/v2/" && !strings.HasPrefix(r.URL.Path, "/v2/"+u+"/")) {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"no"}]}`, http.StatusUnauthorized)
				return
			}
			mu.Lock()
			seen[u] = true
			mu.Unlock()
			reg.ServeHTTP(w, r)
		})
	})
	_, out := packed(t, CompressionGzip)
	img, _ := onlyImage(t, out)
	for _, repo := range []string{"team-a/app", "ops/private"} {
		tag, err := name.NewTag(host + "/" + repo + ":1")
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(tag, img, remote.WithAuth(&authn.Basic{Username: "ops", Password: "ops-secret"})); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	clear(seen) // the pushes
	mu.Unlock()
	// The machine's own login is the operator's, which reads everything.
	docker := t.TempDir()
	t.Setenv("DOCKER_CONFIG", docker)
	writeDockerConfig(t, filepath.Join(docker, "config.json"), host, "ops", "ops-secret", "")
	dir := t.TempDir()
	// A credential helper named in an atespace's file is never run (it
	// does not exist: running it would fail the pull).
	writeDockerConfig(t, filepath.Join(dir, "team-a.json"), host, "team-a", "a-secret", "ate-test-no-such-helper")
	// team-b's file names team-a's key for another registry only.
	writeDockerConfig(t, filepath.Join(dir, "team-b.json"), "elsewhere.example", "team-a", "a-secret", "")
	creds, err := ParseCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	perAtespace := NewCache(t.TempDir(), nil, RegistryCredentials(creds))
	ctx := context.Background()

	if _, err := perAtespace.Inspect(ctx, "team-a", host+"/team-a/app:1"); err != nil {
		t.Fatalf("team-a reading its own image: %v", err)
	}
	// A key filed under the registry's URL, as `docker login` may write
	// it, counts for the host.
	writeDockerConfig(t, filepath.Join(dir, "team-d.json"), "http://"+host, "team-a", "a-secret", "")
	if _, err := perAtespace.Inspect(ctx, "team-d", host+"/team-a/app:1"); err != nil {
		t.Fatalf("a key filed under http://%s: %v", host, err)
	}
	for _, tc := range []struct{ atespace, ref string }{
		{"team-a", host + "/ops/private:1"},   // its key, another's repository
		{"team-b", host + "/team-a/app:1"},    // no key for this registry
		{"team-c", host + "/team-a/app:1"},    // no file at all
		{"", host + "/team-a/app:1"},          // no atespace
		{"../team-a", host + "/team-a/app:1"}, // a name leaving the directory
	} {
		if _, err := perAtespace.Inspect(ctx, tc.atespace, tc.ref); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("atespace %q reading %s: %v, want ErrUnauthorized", tc.atespace, tc.ref, err)
		} else if want := map[string]string{"team-a": "with the key in " + filepath.Join(dir, "team-a.json"),
			"team-c": "anonymously (no " + filepath.Join(dir, "team-c.json") + ")"}[tc.atespace]; !strings.Contains(err.Error(), want) {
			t.Errorf("atespace %q reading %s: %v, want it to say it pulled %s", tc.atespace, tc.ref, err, want)
		}
		if _, err := perAtespace.EnsurePinned(ctx, tc.atespace, tc.ref, ""); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("atespace %q unpacking %s: %v, want ErrUnauthorized", tc.atespace, tc.ref, err)
		}
	}
	// Without the option, pulls are anonymous: the machine's login is
	// not lent to whoever writes a template.
	if _, err := NewCache(t.TempDir(), nil).Inspect(ctx, "team-a", host+"/ops/private:1"); !errors.Is(err, ErrUnauthorized) ||
		!strings.Contains(err.Error(), "pulled anonymously (--registry-credentials anonymous") {
		t.Errorf("default credentials reading ops/private: %v, want ErrUnauthorized saying it pulled anonymously", err)
	}
	mu.Lock()
	if seen["ops"] {
		t.Errorf("a tenant's pull was answered with the operator's login")
	}
	mu.Unlock()

	// "node" is the operator's explicit choice to lend it.
	node, err := ParseCredentials(CredentialsNode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewCache(t.TempDir(), nil, RegistryCredentials(node)).EnsurePinned(ctx, "team-b", host+"/ops/private:1", ""); err != nil {
		t.Errorf("--registry-credentials=node: %v", err)
	}
}

// TestRegistryCA: a registry whose certificate comes from the
// installation's own CA is trusted for pulls with a credentials
// directory holding that CA as ca.crt, for every atespace (with a key or
// not); without the file the pull fails on the unknown authority, and a
// file that holds no certificate is an error naming it.
func TestRegistryCA(t *testing.T) {
	srv := httptest.NewTLSServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(func() {
		srv.Close()
		srv.Client().CloseIdleConnections()
		transports.Range(func(_, v any) bool { v.(*http.Transport).CloseIdleConnections(); return true })
	})
	host := strings.TrimPrefix(srv.URL, "https://")
	_, out := packed(t, CompressionGzip)
	img, _ := onlyImage(t, out)
	tag, err := name.NewTag(host + "/team-a/app:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img, remote.WithTransport(srv.Client().Transport)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	creds, err := ParseCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := NewCache(t.TempDir(), nil, RegistryCredentials(creds))
	ctx := context.Background()
	if _, err := c.Inspect(ctx, "team-a", tag.String()); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("pull without the registry's CA: %v, want a certificate error", err)
	}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(dir, RegistryCAFile), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, atespace := range []string{"team-a", ""} {
		if _, err := c.EnsurePinned(ctx, atespace, tag.String(), ""); err != nil {
			t.Fatalf("pull for atespace %q trusting %s: %v", atespace, RegistryCAFile, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, RegistryCAFile), []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Inspect(ctx, "team-a", tag.String()); err == nil || !strings.Contains(err.Error(), "holds no PEM certificate") {
		t.Fatalf("pull with a ca.crt holding no certificate: %v, want an error naming the file", err)
	}
}

// TestRegistryPlainHTTPRefused: pulls never go to a registry over plain
// HTTP unless it is on loopback (go-containerregistry falls back to HTTP
// for private-network registries): the request is refused before it
// leaves, with what to do instead.
func TestRegistryPlainHTTPRefused(t *testing.T) {
	sent := 0
	next := roundTripFunc(func(*http.Request) (*http.Response, error) {
		sent++
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	})
	for _, tc := range []struct {
		url  string
		sent bool
	}{
		{"http://10.1.2.3:5000/v2/", false},
		{"http://192.168.1.10/v2/", false},
		{"http://registry.example/v2/", false},
		{"https://10.1.2.3:5000/v2/", true},
		{"http://127.0.0.1:5000/v2/", true},
		{"http://[::1]:5000/v2/", true},
		{"http://localhost:5000/v2/", true},
	} {
		before := sent
		req, err := http.NewRequest(http.MethodGet, tc.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = httpsOnly{next}.RoundTrip(req)
		if got := sent > before; got != tc.sent || (err == nil) != tc.sent {
			t.Errorf("%s: sent %v, err %v; want sent %v", tc.url, got, err, tc.sent)
		}
		if err != nil && !strings.Contains(err.Error(), "plain HTTP refused") {
			t.Errorf("%s: %v, want it to say plain HTTP is refused", tc.url, err)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// serveRegistry runs an in-process OCI distribution server, behind
// wrap, on 127.0.0.1 (plain HTTP, as go-containerregistry uses for
// loopback registries) and returns its host:port.
func serveRegistry(t *testing.T, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(wrap(registry.New(registry.Logger(log.New(io.Discard, "", 0)))))
	t.Cleanup(func() {
		srv.Close()
		// remote keeps idle keep-alive connections; goleak would see
		// their goroutines.
		remote.DefaultTransport.(*http.Transport).CloseIdleConnections()
	})
	return strings.TrimPrefix(srv.URL, "http://")
}

// writeDockerConfig writes a Docker config.json holding user's key for
// host and, unless empty, a credential helper for every registry.
func writeDockerConfig(t *testing.T, path, host, user, password, helper string) {
	t.Helper()
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	cfg := fmt.Sprintf(`{"auths":{%q:{"auth":%q}},"credsStore":%q}`, host, auth, helper)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestParseCredentials(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, want string }{
		{"", CredentialsAnonymous},
		{"anonymous", CredentialsAnonymous},
		{"node", CredentialsNode},
		{"relative/dir", "want anonymous, node or an absolute directory"},
		{"/no/such/ate-dir", "no such file"},
		{file, "not a directory"},
	} {
		c, err := ParseCredentials(tc.in)
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = c.String()
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("ParseCredentials(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestRegistryHostMissing: a registry host that does not exist is the
// template author's mistake (ErrNotFound), and the error does not name
// this machine's DNS resolver. (The error is made here: whether a real
// lookup fails depends on the machine's resolver.)
func TestRegistryHostMissing(t *testing.T) {
	r, err := ParseRef("registry.invalid/app:1")
	if err != nil {
		t.Fatal(err)
	}
	lookup := func(notFound bool) error {
		return &url.Error{Op: "Get", URL: "https://registry.invalid/v2/", Err: &net.OpError{Op: "dial", Net: "tcp",
			Err: &net.DNSError{Err: "no such host", Name: "registry.invalid", Server: "10.255.255.53:53", IsNotFound: notFound, IsTimeout: !notFound}}}
	}
	if err := registryError(r, lookup(true)); !errors.Is(err, ErrNotFound) || strings.Contains(err.Error(), "10.255.255.53") {
		t.Errorf("missing host: %v, want ErrNotFound without the resolver's address", err)
	}
	if err := registryError(r, lookup(false)); errors.Is(err, ErrNotFound) || strings.Contains(err.Error(), "10.255.255.53") {
		t.Errorf("resolver timeout: %v, want a retryable error without the resolver's address", err)
	}
}
