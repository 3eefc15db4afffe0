package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"substrate.dev/ate/internal/ateconfig"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/pki"
)

// TestServerAddress checks how the CLI finds the server: --server, the config
// file named by --config or $ATE_CONFIG, and the error when neither exists.
func TestServerAddress(t *testing.T) {
	addr := serve(t, newFake())
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := ateconfig.Write(good, ateconfig.Config{Server: addr}); err != nil {
		t.Fatal(err)
	}
	wrong := filepath.Join(dir, "wrong.yaml")
	if err := ateconfig.Write(wrong, ateconfig.Config{Server: closedAddr(t)}); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.yaml")
	writeFile(t, empty, "{}\n")
	missing := filepath.Join(dir, "missing.yaml")
	// Top level and context "wrong" dial nothing; current-context "good"
	// the fake.
	contexts := filepath.Join(dir, "contexts.yaml")
	writeFile(t, contexts, "server: "+closedAddr(t)+"\ncurrent-context: good\ncontexts:\n- name: good\n  server: "+addr+"\n- name: wrong\n  server: "+closedAddr(t)+"\n")

	for _, tc := range []struct {
		name    string
		env     map[string]string
		args    []string
		wantErr string // substring of stderr; empty means success
	}{
		{"config flag", nil, []string{"--config", good}, ""},
		{"ATE_CONFIG", map[string]string{"ATE_CONFIG": good}, nil, ""},
		{"HOME", map[string]string{"HOME": dir}, nil, "no client config at " + filepath.Join(dir, ".ate", "config.yaml")},
		{"server overrides config", nil, []string{"--config", wrong, "--server", addr}, ""},
		{"server without config", nil, []string{"--config", missing, "--server", addr}, ""},
		{"missing config", nil, []string{"--config", missing}, "run `ate up` to start a local server (it writes this file; with --data-dir DIR it writes DIR/config.yaml: pass --config DIR/config.yaml or set $ATE_CONFIG), or pass --server HOST:PORT"},
		{"config without server", nil, []string{"--config", empty}, "sets no server"},
		{"current-context", nil, []string{"--config", contexts}, ""},
		{"--ate-context", nil, []string{"--config", contexts, "--ate-context", "wrong"}, `(client config ` + contexts + `, context "wrong")`},
		{"unknown --ate-context", nil, []string{"--config", contexts, "--ate-context", "nope"}, `client config ` + contexts + `: context "nope": no such context (it has good, wrong)`},
		{"--ate-context without a file", nil, []string{"--config", missing, "--server", addr, "--ate-context", "good"}, "no client config at " + missing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := NewRootCommand(WithGetenv(func(k string) string { return tc.env[k] }), WithNow(func() time.Time { return testNow }))
			var stdout, stderr bytes.Buffer
			root.SetOut(&stdout)
			root.SetErr(&stderr)
			root.SetArgs(append(tc.args, "get", "workers"))
			code := Main(t.Context(), root)
			if tc.wantErr == "" {
				if code != 0 || !strings.Contains(stdout.String(), "w-0") {
					t.Errorf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
				}
				return
			}
			if code == 0 || !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("exit %d, stderr %q, want it to contain %q", code, stderr.String(), tc.wantErr)
			}
		})
	}
}

// TestClientConfigKubernetesMode: which settings Kubernetes mode takes
// from a default config file that holds a local `ate up`'s top-level CA
// and token, a current-context and contexts named like kubeconfig
// contexts: the context named after the kubeconfig context in use, else
// nothing (the issue: a local CA sent to a cluster failed the TLS
// handshake). Outside Kubernetes mode the same file gives --ate-context's
// or current-context's settings.
func TestClientConfigKubernetesMode(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	writeFile(t, kubeconfig, `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: u, user: {token: not-for-ate}}]
contexts:
- {name: kind-prod, context: {cluster: c, user: u}}
- {name: kind-dev, context: {cluster: c, user: u}}
- {name: remote, context: {cluster: c, user: u}}
current-context: kind-prod
`)
	t.Setenv("KUBECONFIG", kubeconfig) // client-go reads the real environment
	home := filepath.Join(dir, "home")
	path := filepath.Join(home, ".ate", "config.yaml")
	if err := ateconfig.WriteFile(path, &ateconfig.File{
		Config:         ateconfig.Config{Server: "127.0.0.1:7070", CertificateAuthority: "pki/ca.crt", Token: "local-admin"},
		CurrentContext: "local",
		Contexts: []ateconfig.Context{
			{Name: "local", Config: ateconfig.Config{Server: "127.0.0.1:7070", CertificateAuthority: "/local/ca.crt", Token: "local-ctx"}},
			{Name: "kind-prod", Config: ateconfig.Config{CertificateAuthority: "prod.crt", Token: "prod-token"}},
			{Name: "remote", Config: ateconfig.Config{Server: "ate.example.com:7070", CertificateAuthority: "/remote/ca.crt", Token: "remote-token"}},
		},
	}); err != nil {
		t.Fatal(err)
	}
	prodCA := filepath.Join(home, ".ate", "prod.crt")
	emptyHome := t.TempDir()
	target := KubeTarget(DefaultKubeNamespace)

	for _, tc := range []struct {
		name      string
		a         app // the flags; getenv, program and --ate-namespace filled in
		homeDir   string
		want      ateconfig.Config
		wantSrc   string // the whole configSource.String()
		wantErr   string
		kubectlAt bool // run as kubectl-ate
	}{
		{name: "kubectl-ate: the context named like the kubeconfig's current", kubectlAt: true,
			want:    ateconfig.Config{Server: target, CertificateAuthority: prodCA, Token: "prod-token"},
			wantSrc: `(client config ` + path + `, context "kind-prod"; Kubernetes mode: kubeconfig context "kind-prod")`},
		{name: "--kubeconfig", a: app{kubeconfig: kubeconfig},
			want:    ateconfig.Config{Server: target, CertificateAuthority: prodCA, Token: "prod-token"},
			wantSrc: `(client config ` + path + `, context "kind-prod"; Kubernetes mode: kubeconfig context "kind-prod")`},
		{name: "--context without an ate context: no CA, no token", a: app{kubeContext: "kind-dev"},
			want:    ateconfig.Config{Server: target},
			wantSrc: `(no client config: Kubernetes mode, no ate context named "kind-dev" in ` + path + `)`},
		{name: "no config file", kubectlAt: true, homeDir: emptyHome,
			want:    ateconfig.Config{Server: target},
			wantSrc: `(no client config: Kubernetes mode, no ate context named "kind-prod": no file ` + filepath.Join(emptyHome, ".ate", "config.yaml") + `)`},
		{name: "flags still apply", a: app{kubeContext: "kind-dev", ca: "/flag/ca.crt", token: "flag-token"},
			want:    ateconfig.Config{Server: target, CertificateAuthority: "/flag/ca.crt", Token: "flag-token"},
			wantSrc: `(no client config: Kubernetes mode, no ate context named "kind-dev" in ` + path + `; given as flags: --certificate-authority, --token)`},
		{name: "the context's server", a: app{kubeContext: "remote"},
			want: ateconfig.Config{Server: "ate.example.com:7070", CertificateAuthority: "/remote/ca.crt", Token: "remote-token"}},
		{name: "--server, the context's CA and token", kubectlAt: true, a: app{server: "127.0.0.1:7171"},
			want: ateconfig.Config{Server: "127.0.0.1:7171", CertificateAuthority: prodCA, Token: "prod-token"}},
		{name: "--ate-context refused", kubectlAt: true, a: app{ateContext: "kind-prod"},
			wantErr: "--ate-context does not apply in Kubernetes mode"},
		{name: "plain ate: current-context",
			want:    ateconfig.Config{Server: "127.0.0.1:7070", CertificateAuthority: "/local/ca.crt", Token: "local-ctx"},
			wantSrc: `(client config ` + path + `, context "local")`},
		{name: "plain ate: --ate-context", a: app{ateContext: "remote"},
			want: ateconfig.Config{Server: "ate.example.com:7070", CertificateAuthority: "/remote/ca.crt", Token: "remote-token"}},
		{name: "plain ate: --ate-context without a server, --server", a: app{ateContext: "kind-prod", server: "h:1"},
			want: ateconfig.Config{Server: "h:1", CertificateAuthority: prodCA, Token: "prod-token"}},
		{name: "plain ate: context without a server", a: app{ateContext: "kind-prod"},
			wantErr: `client config ` + path + ` sets no server (context "kind-prod")`},
		{name: "plain ate: unknown --ate-context", a: app{ateContext: "kind-dev"},
			wantErr: `client config ` + path + `: context "kind-dev": no such context`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := home
			if tc.homeDir != "" {
				h = tc.homeDir
			}
			a := tc.a
			a.getenv = func(k string) string { return map[string]string{"HOME": h}[k] }
			a.program = "ate"
			if tc.kubectlAt {
				a.program = KubectlPluginName
			}
			a.ateNamespace = DefaultKubeNamespace
			got, src, err := a.clientConfig()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("clientConfig = %+v, %v; want an error saying %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("clientConfig = %+v, %v; want %+v", got, err, tc.want)
			}
			if tc.wantSrc != "" && src.String() != tc.wantSrc {
				t.Errorf("source %s\nwant   %s", src, tc.wantSrc)
			}
		})
	}
}

// serveTLS serves f on host with TLS, a certificate from a new CA (its
// ca.crt path returned) and, as the API server does, calls refused with
// Unauthenticated unless they carry "authorization: Bearer <token>".
func serveTLS(t *testing.T, f *fakeControl, host, token string) (addr, caFile string) {
	t.Helper()
	ca, err := pki.NewCA("", 0)
	if err != nil {
		t.Fatal(err)
	}
	cert, _, _, err := ca.Issue(pki.LeafRequest{Identity: auth.Identity{Component: auth.ComponentAPIServer, Name: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(t.TempDir(), "ca.crt")
	writeFile(t, caFile, string(ca.CertPEM))
	check := func(ctx context.Context) error {
		if md, _ := metadata.FromIncomingContext(ctx); !slices.Equal(md.Get("authorization"), []string{"Bearer " + token}) {
			return status.Error(codes.Unauthenticated, "invalid bearer token")
		}
		return nil
	}
	addr = serveWith(t, f, host,
		grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12})),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
			if err := check(ctx); err != nil {
				return nil, err
			}
			return next(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) error {
			if err := check(ss.Context()); err != nil {
				return err
			}
			return next(srv, ss)
		}))
	return addr, caFile
}

// TestConnectionErrorsNameTheConfig: a failure the client's settings may
// cause (a TLS handshake with a plaintext server, a refused connection, a
// rejected token) says which client config and context were used; a
// context's CA and token reach a TLS server.
func TestConnectionErrorsNameTheConfig(t *testing.T) {
	plain := serve(t, newFake())
	secure, caFile := serveTLS(t, newFake(), "127.0.0.1", "good-token")
	closed := closedAddr(t)
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := ateconfig.WriteFile(path, &ateconfig.File{
		Config: ateconfig.Config{Server: closed},
		Contexts: []ateconfig.Context{
			{Name: "ca-on-plain", Config: ateconfig.Config{Server: plain, CertificateAuthority: caFile}},
			{Name: "good", Config: ateconfig.Config{Server: secure, CertificateAuthority: caFile, Token: "good-token"}},
			{Name: "bad-token", Config: ateconfig.Config{Server: secure, CertificateAuthority: caFile, Token: "stale"}},
		},
	}); err != nil {
		t.Fatal(err)
	}
	absent := filepath.Join(t.TempDir(), "absent.yaml")
	for _, tc := range []struct {
		name string
		args []string
		want []string // in stderr; none: success
	}{
		{"context's CA and token", []string{"--ate-context", "good"}, nil},
		{"TLS to a plaintext server", []string{"--ate-context", "ca-on-plain"}, []string{
			"Error: TLS handshake with the ate server at " + plain + " failed: authentication handshake failed",
			`(client config ` + path + `, context "ca-on-plain")`}},
		{"rejected token", []string{"--ate-context", "bad-token"}, []string{
			"Error: invalid bearer token (client config " + path + `, context "bad-token")`}},
		{"--token over the context's", []string{"--ate-context", "good", "--token", "stale"}, []string{
			`invalid bearer token (client config ` + path + `, context "good"; given as flags: --token)`}},
		{"refused, top-level settings", nil, []string{
			"Error: cannot reach the ate server at " + closed,
			"(client config " + path + ", top-level settings, no context)"}},
		{"no file, --server", []string{"--config", absent, "--server", closed}, []string{
			"(no client config at " + absent + "; given as flags: --server)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := NewRootCommand(WithGetenv(func(k string) string { return map[string]string{"ATE_CONFIG": path}[k] }), WithNow(func() time.Time { return testNow }))
			var stdout, stderr bytes.Buffer
			root.SetOut(&stdout)
			root.SetErr(&stderr)
			root.SetArgs(append(tc.args, "get", "workers"))
			code := Main(t.Context(), root)
			if tc.want == nil {
				if code != 0 || !strings.Contains(stdout.String(), "w-0") {
					t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
				}
				return
			}
			for _, w := range tc.want {
				if code == 0 || !strings.Contains(stderr.String(), w) {
					t.Errorf("exit %d, stderr %q; want %q in it", code, stderr.String(), w)
				}
			}
		})
	}
}
