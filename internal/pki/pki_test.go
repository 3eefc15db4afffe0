package pki

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/testwait"
)

func id(c auth.Component, name string) auth.Identity { return auth.Identity{Component: c, Name: name} }

func newCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA(auth.DefaultTrustDomain, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func source(t *testing.T, ca *CA, who auth.Identity) *MemorySource {
	t.Helper()
	s, err := NewMemorySource(ca, LeafRequest{Identity: who})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// staticSource presents cert and trusts ca: certificates no MemorySource
// would make (expired ones).
type staticSource struct {
	cert  *tls.Certificate
	roots *x509.CertPool
}

func (s staticSource) Certificate() (*tls.Certificate, error) { return s.cert, nil }
func (s staticSource) Roots() *x509.CertPool                  { return s.roots }

// expired is a leaf of ca for who that expired an hour ago.
func expired(t *testing.T, ca *CA, who auth.Identity) staticSource {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: randomSerial(), Subject: pkix.Name{CommonName: who.String()},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs: []*url.URL{who.URI(auth.DefaultTrustDomain)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return staticSource{cert: &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, roots: pool([]*x509.Certificate{ca.Cert})}
}

// handshake runs one TLS connection between server and client configs
// over loopback and returns the server's handshake error and the
// client's (which, in TLS 1.3, sees a refused certificate on its first
// read).
func handshake(t *testing.T, server, client *tls.Config) (serverErr, clientErr error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	errc := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		if err := c.(*tls.Conn).Handshake(); err != nil {
			errc <- err
			return
		}
		errc <- nil
		_, _ = c.Write([]byte("x"))
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), client)
	if err == nil {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = io.ReadFull(c, make([]byte, 1))
		c.Close()
	}
	return <-errc, err
}

func TestServerRefusesBadClientCertificates(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	api := source(t, ca, id(auth.ComponentAPIServer, "a"))
	node := source(t, ca, id(auth.ComponentNode, "n1"))
	for _, tc := range []struct {
		name     string
		mode     ClientCerts
		allow    []auth.Component
		client   Source // nil: no certificate
		wantFail string // in the server's error; "" for success
	}{
		{"required, valid", ClientCertRequired, nil, api, ""},
		{"required, none", ClientCertRequired, nil, nil, "didn't provide a certificate"},
		{"required, another CA", ClientCertRequired, nil, staticSource{cert: mustCert(t, source(t, other, id(auth.ComponentAPIServer, "a"))), roots: api.Roots()}, "unknown authority"},
		{"required, expired", ClientCertRequired, nil, expired(t, ca, id(auth.ComponentAPIServer, "a")), "expired"},
		{"required, component not allowed", ClientCertRequired, []auth.Component{auth.ComponentRouter, auth.ComponentAPIServer}, node, "may not connect here"},
		{"required, component allowed", ClientCertRequired, []auth.Component{auth.ComponentRouter, auth.ComponentNode}, node, ""},
		{"optional, none", ClientCertOptional, nil, nil, ""},
		{"optional, another CA", ClientCertOptional, nil, staticSource{cert: mustCert(t, source(t, other, id(auth.ComponentRouter, "r"))), roots: api.Roots()}, "unknown authority"},
		{"optional, expired", ClientCertOptional, nil, expired(t, ca, id(auth.ComponentRouter, "r")), "expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := ServerConfig(node, auth.DefaultTrustDomain, tc.mode, tc.allow...)
			var cli *tls.Config
			if tc.client == nil {
				tc.client = staticSource{roots: node.Roots()}
			}
			cli = ClientConfig(tc.client, auth.DefaultTrustDomain, auth.ComponentNode)
			serr, cerr := handshake(t, srv, cli)
			if tc.wantFail == "" {
				if serr != nil || cerr != nil {
					t.Fatalf("refused: server %v, client %v", serr, cerr)
				}
				return
			}
			if serr == nil || !strings.Contains(serr.Error(), tc.wantFail) {
				t.Fatalf("server handshake error %v, want one saying %q", serr, tc.wantFail)
			}
			if cerr == nil {
				t.Fatal("the client's connection worked")
			}
		})
	}
}

func mustCert(t *testing.T, s Source) *tls.Certificate {
	t.Helper()
	c, err := s.Certificate()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClientRefusesBadServers(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	router := source(t, ca, id(auth.ComponentRouter, "r"))
	for _, tc := range []struct {
		name     string
		server   Source
		want     auth.Component
		wantFail string
	}{
		{"the component wanted", source(t, ca, id(auth.ComponentNode, "n")), auth.ComponentNode, ""},
		{"another component", source(t, ca, id(auth.ComponentRouter, "r2")), auth.ComponentNode, "is not a node"},
		{"another CA", staticSource{cert: mustCert(t, source(t, other, id(auth.ComponentNode, "n"))), roots: router.Roots()}, auth.ComponentNode, "unknown authority"},
		{"expired", expired(t, ca, id(auth.ComponentNode, "n")), auth.ComponentNode, "expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, cerr := handshake(t, ServerConfig(tc.server, "", ClientCertRequired), ClientConfig(router, "", tc.want))
			if tc.wantFail == "" {
				if cerr != nil {
					t.Fatal(cerr)
				}
				return
			}
			if cerr == nil || !strings.Contains(cerr.Error(), tc.wantFail) {
				t.Fatalf("client error %v, want one saying %q", cerr, tc.wantFail)
			}
		})
	}
}

func TestUserClientConfig(t *testing.T) {
	ca := newCA(t)
	// A serving certificate without an identity (another issuer's, say)
	// is accepted for the host name it names, and only for it.
	plain, _, _, err := ca.Issue(LeafRequest{Identity: id(auth.ComponentRouter, "x"), IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	plain.Leaf.URIs = nil // only what VerifyConnection reads; the wire copy keeps its URI
	roots := pool([]*x509.Certificate{ca.Cert})
	apiSrv := ServerConfig(source(t, ca, id(auth.ComponentAPIServer, "a")), "", ClientCertOptional)
	if _, err := handshake(t, apiSrv, UserClientConfig(roots)); err != nil {
		t.Fatalf("an apiserver identity: %v", err)
	}
	routerSrv := ServerConfig(source(t, ca, id(auth.ComponentRouter, "r")), "", ClientCertOptional)
	cfg := UserClientConfig(roots)
	cfg.ServerName = "api.example"
	if _, err := handshake(t, routerSrv, cfg); err == nil || !strings.Contains(err.Error(), "no apiserver identity") {
		t.Fatalf("a router's certificate for api.example: %v", err)
	}
	if _, err := handshake(t, apiSrv, UserClientConfig(x509.NewCertPool())); err == nil {
		t.Fatal("a server of an untrusted CA was accepted")
	}
}

func TestInitCAAndIssueToDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	ca, created, err := InitCA(dir, "example.org")
	if err != nil || !created {
		t.Fatalf("InitCA: %v, created %v", err, created)
	}
	again, created, err := InitCA(dir, "example.org")
	if err != nil || created || !again.Cert.Equal(ca.Cert) {
		t.Fatalf("second InitCA: %v, created %v: want the same CA kept", err, created)
	}
	out := filepath.Join(t.TempDir(), "node-a")
	leaf, err := ca.IssueToDir(LeafRequest{Identity: id(auth.ComponentNode, "node-a"), TrustDomain: "example.org",
		DNS: []string{"node-a.example.org"}, IPs: []net.IP{net.ParseIP("10.0.0.7")}, TTL: time.Hour}, out)
	if err != nil {
		t.Fatal(err)
	}
	if got := leaf.URIs[0].String(); got != "spiffe://example.org/ate/node/node-a" {
		t.Errorf("URI SAN %s", got)
	}
	if life := leaf.NotAfter.Sub(leaf.NotBefore); life < time.Hour || life > time.Hour+clockSkew {
		t.Errorf("life %s, want 1h (+ backdating)", life)
	}
	if len(leaf.ExtKeyUsage) != 2 || leaf.DNSNames[0] != "node-a.example.org" || !leaf.IPAddresses[0].Equal(net.ParseIP("10.0.0.7")) {
		t.Errorf("usages %v, DNS %v, IPs %v", leaf.ExtKeyUsage, leaf.DNSNames, leaf.IPAddresses)
	}
	for path, want := range map[string]fs.FileMode{filepath.Join(dir, CAKeyFile): 0o600, filepath.Join(out, KeyFile): 0o600, filepath.Join(out, CertFile): 0o644} {
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: %v, mode %v, want %v", path, err, st.Mode().Perm(), want)
		}
	}
	// Only one of the two files: refused, not overwritten.
	half := t.TempDir()
	if err := os.WriteFile(filepath.Join(half, CAFile), ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := InitCA(half, ""); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a directory with ca.crt only: %v", err)
	}
	if _, _, _, err := ca.Issue(LeafRequest{Identity: id("sidecar", "x")}); err == nil {
		t.Error("an unknown component was issued a certificate")
	}
	// --tls-dir for the wrong component, or no setting at all.
	if _, err := (Settings{Dir: out, TrustDomain: "example.org"}).Load(t.Context(), auth.ComponentRouter, nil); err == nil || !strings.Contains(err.Error(), "not a router's") {
		t.Errorf("a node's certificate loaded as a router's: %v", err)
	}
	if _, err := (Settings{}).Load(t.Context(), auth.ComponentRouter, nil); !errors.Is(err, ErrNoTLSSettings) {
		t.Errorf("no settings: %v", err)
	}
	if tr, err := (Settings{Insecure: true}).Load(t.Context(), auth.ComponentRouter, nil); err != nil || tr != nil {
		t.Errorf("--insecure: %v, %v", tr, err)
	}
}

// TestFileSourceRotation: files replaced under a listener are used by the
// next handshake; a connection made before carries on.
func TestFileSourceRotation(t *testing.T) {
	ca := newCA(t)
	dir := t.TempDir()
	req := LeafRequest{Identity: id(auth.ComponentNode, "n")}
	first, err := ca.IssueToDir(req, dir)
	if err != nil {
		t.Fatal(err)
	}
	fsrc, err := NewFileSource(t.Context(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := source(t, ca, id(auth.ComponentRouter, "r"))
	ln, err := tls.Listen("tcp", "127.0.0.1:0", ServerConfig(fsrc, "", ClientCertRequired))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	dial := func() (*tls.Conn, *x509.Certificate) {
		c, err := tls.Dial("tcp", ln.Addr().String(), ClientConfig(client, "", auth.ComponentNode))
		if err != nil {
			t.Fatal(err)
		}
		return c, c.ConnectionState().PeerCertificates[0]
	}
	old, seen := dial()
	defer old.Close()
	if !seen.Equal(first) {
		t.Fatal("the first connection saw another certificate")
	}
	second, err := ca.IssueToDir(req, dir)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "a new handshake presents the rotated certificate", func() bool {
		c, leaf := dial()
		c.Close()
		return leaf.Equal(second)
	})
	if _, err := old.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(old, b); err != nil || string(b) != "ping" {
		t.Fatalf("the connection made before the rotation: %q, %v", b, err)
	}
}

func TestMemorySourceRenews(t *testing.T) {
	ca := newCA(t)
	s, err := NewMemorySource(ca, LeafRequest{Identity: id(auth.ComponentRouter, "r"), TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	first := mustCert(t, s)
	if c := mustCert(t, s); c != first {
		t.Fatal("renewed before two thirds of the life")
	}
	testwait.Until(t, "a renewal at two thirds of the life", func() bool { return mustCert(t, s) != first })
	if c := mustCert(t, s); !time.Now().Before(c.Leaf.NotAfter) || s.Issued() < 2 {
		t.Fatalf("after renewal: notAfter %s, issued %d", c.Leaf.NotAfter, s.Issued())
	}
}

// TestGRPC: principals reach handlers; RequireComponents refuses other
// components with PermissionDenied.
func TestGRPC(t *testing.T) {
	ca := newCA(t)
	srvT := &Transport{Source: source(t, ca, id(auth.ComponentNode, "n")), TrustDomain: auth.DefaultTrustDomain}
	var seen *auth.Principal
	gs := grpc.NewServer(append(append(srvT.ServerOptions(ClientCertRequired), srvT.RequireComponents(auth.ComponentAPIServer)...),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			seen, _ = auth.FromContext(ctx)
			return h(ctx, req)
		}))...)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()
	call := func(who auth.Identity) error {
		cli := &Transport{Source: source(t, ca, who), TrustDomain: auth.DefaultTrustDomain}
		conn, err := grpc.NewClient(ln.Addr().String(), cli.DialOption(auth.ComponentNode))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, err = healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
		return err
	}
	if err := call(id(auth.ComponentAPIServer, "api-0")); err != nil {
		t.Fatal(err)
	}
	if seen == nil || seen.Component == nil || *seen.Component != id(auth.ComponentAPIServer, "api-0") {
		t.Fatalf("principal in the handler: %v", seen)
	}
	if err := call(id(auth.ComponentRouter, "r")); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a router calling: %v, want PermissionDenied", err)
	}
}
