package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/pki"
	"substrate.dev/ate/internal/testwait"
)

// tlsSource presents a fixed certificate (nil: none) and trusts roots.
type tlsSource struct {
	cert  *tls.Certificate
	roots *x509.CertPool
}

func (s tlsSource) Certificate() (*tls.Certificate, error) { return s.cert, nil }
func (s tlsSource) Roots() *x509.CertPool                  { return s.roots }

// leafOf loads a --tls-dir's pair.
func leafOf(t testing.TB, dir string) *tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(filepath.Join(dir, pki.CertFile), filepath.Join(dir, pki.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

// expiredLeaf is a certificate of the CA in caDir for who that expired
// an hour ago: `ate certs` makes none such.
func expiredLeaf(t testing.TB, ca string, who auth.Identity) *tls.Certificate {
	t.Helper()
	c, err := pki.LoadCA(ca)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: who.String()},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs: []*url.URL{who.URI(auth.DefaultTrustDomain)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.Cert, &key.PublicKey, c.Key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// tlsProbe opens a TLS connection to addr with cfg (ALPN h2 for a gRPC
// server, which refuses connections without it; http/1.1 for the
// tunnel), completes the handshake and reads: a server that refused the
// client's certificate ends the connection with an alert (TLS 1.3 tells
// the client on its first read). It returns the server's certificate if
// the connection stayed open (the read timed out, or got the gRPC
// server's HTTP/2 preface).
func tlsProbe(addr string, cfg *tls.Config) (*x509.Certificate, error) {
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	n, err := c.Read(make([]byte, 1))
	if ne, ok := err.(interface{ Timeout() bool }); n > 0 || ok && ne.Timeout() {
		return c.ConnectionState().PeerCertificates[0], nil
	}
	return nil, err
}

// probeConfig is pki.ClientConfig with cert (nil: none) and roots, for a
// server of component server speaking proto (ALPN).
func probeConfig(cert *tls.Certificate, roots *x509.CertPool, server auth.Component, proto string) *tls.Config {
	cfg := pki.ClientConfig(tlsSource{cert: cert, roots: roots}, auth.DefaultTrustDomain, server)
	cfg.NextProtos = []string{proto}
	return cfg
}

// TestMTLSListeners: every listener between components, in real
// processes with certificates from `ate certs`: a client without a
// certificate (where one is required), with one of another CA, or an
// expired one is refused at the handshake; a router may not call the
// node agent; a node may not register as another or report another's
// workers.
func TestMTLSListeners(t *testing.T) {
	c := startCluster(t, "node-a")
	c.counterActor()
	resp, err := c.in.client.ListNodes(context.Background(), &atev1.ListNodesRequest{})
	if err != nil || len(resp.GetNodes()) != 1 {
		t.Fatalf("nodes: %v, %v", resp, err)
	}
	nodeA := resp.GetNodes()[0]
	roots := x509.NewCertPool()
	ca, err := pki.LoadCA(caDir)
	if err != nil {
		t.Fatal(err)
	}
	roots.AddCert(ca.Cert)
	otherCA := filepath.Join(t.TempDir(), "other-ca")
	if out, err := initCA(otherCA); err != nil {
		t.Fatalf("ate certs init: %v\n%s", err, out)
	}
	router := leafOf(t, issueCert(t, caDir, "router", "probe"))
	apiserver := leafOf(t, issueCert(t, caDir, "apiserver", "probe"))
	foreign := leafOf(t, issueCert(t, otherCA, "apiserver", "probe"))
	stale := expiredLeaf(t, caDir, auth.Identity{Component: auth.ComponentAPIServer, Name: "probe"})

	listeners := []struct {
		name, addr, proto string
		server            auth.Component
		needsCert         bool
		validClients      []*tls.Certificate
	}{
		// Users come without certificates (bearer tokens): TLS accepts them.
		{"API server gRPC", c.in.apiAddr, "h2", auth.ComponentAPIServer, false, []*tls.Certificate{router}},
		{"node agent gRPC", nodeA.GetAddress(), "h2", auth.ComponentNode, true, []*tls.Certificate{apiserver}},
		{"worker tunnel", nodeA.GetTunnelAddress(), "http/1.1", auth.ComponentNode, true, []*tls.Certificate{router, apiserver}},
	}
	for _, l := range listeners {
		t.Run(l.name, func(t *testing.T) {
			probe := func(cert *tls.Certificate) error {
				_, err := tlsProbe(l.addr, probeConfig(cert, roots, l.server, l.proto))
				return err
			}
			for _, cert := range l.validClients {
				if err := probe(cert); err != nil {
					t.Fatalf("a valid client certificate refused: %v", err)
				}
			}
			if err := probe(nil); (err != nil) != l.needsCert {
				t.Errorf("without a client certificate: %v (certificate required: %v)", err, l.needsCert)
			}
			if err := probe(foreign); err == nil {
				t.Error("a certificate of another CA was accepted")
			}
			if err := probe(stale); err == nil {
				t.Error("an expired certificate was accepted")
			}
		})
	}

	dial := func(addr string, cert *tls.Certificate, server auth.Component) *grpc.ClientConn {
		tr := &pki.Transport{Source: tlsSource{cert: cert, roots: roots}, TrustDomain: auth.DefaultTrustDomain}
		conn, err := grpc.NewClient(addr, tr.DialOption(server))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	t.Run("a router calls the node agent", func(t *testing.T) {
		_, err := atev1.NewNodeAgentClient(dial(nodeA.GetAddress(), router, auth.ComponentNode)).
			ForgetActor(context.Background(), &atev1.ForgetActorRequest{ActorUid: c.in.actor("counter-1").GetUid()})
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("ForgetActor with a router's certificate: %v, want PermissionDenied", err)
		}
		// Which actor runs on which worker is the API server's to ask.
		_, err = atev1.NewNodeAgentClient(dial(nodeA.GetAddress(), router, auth.ComponentNode)).
			HostedActors(context.Background(), &atev1.HostedActorsRequest{})
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("HostedActors with a router's certificate: %v, want PermissionDenied", err)
		}
	})
	workers, err := c.in.client.ListWorkers(context.Background(), &atev1.ListWorkersRequest{})
	if err != nil || len(workers.GetWorkers()) == 0 {
		t.Fatalf("workers: %v, %v", workers, err)
	}
	workerA := workers.GetWorkers()[0].GetName()
	register := func(cert *tls.Certificate, h *atev1.NodeHello) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := atev1.NewNodeRegistryClient(dial(c.in.apiAddr, cert, auth.ComponentAPIServer)).Register(ctx)
		if err != nil {
			return err
		}
		// A refused stream may end before Send does (io.EOF); its status
		// comes from Recv either way.
		_ = s.Send(&atev1.NodeMessage{Msg: &atev1.NodeMessage_Hello{Hello: h}})
		_, err = s.Recv()
		return err
	}
	nodeX := leafOf(t, issueCert(t, caDir, "node", "node-x"))
	for _, tc := range []struct {
		name string
		cert *tls.Certificate
		node string
	}{
		{"node-x registers as node-a", nodeX, "node-a"},
		{"node-x registers node-a's worker", nodeX, "node-x"},
		{"a router registers as a node", router, "node-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := register(tc.cert, &atev1.NodeHello{Node: tc.node, Epoch: time.Now().UnixNano(), Address: "127.0.0.1:1", TunnelAddress: "127.0.0.1:2",
				Snapshots: c.snaps, SandboxClass: "gvisor", Workers: []*atev1.NodeWorker{{Name: workerA}}})
			if status.Code(err) != codes.PermissionDenied {
				t.Fatalf("Register: %v, want PermissionDenied", err)
			}
		})
	}
	// node-a was not disturbed: its actor still answers with its memory.
	c.in.mustCount("default/counter-1", 2)
}

// TestMTLSRotationUnderLoad: `ate up` with 20 s leaves (renewed every
// ~13 s) serves 20 requests/s through its router to an actor for 60 s
// without one failing, while the API server's and the worker tunnel's
// certificates rotate several times (seen by new handshakes) and every
// component's leaf is renewed.
func TestMTLSRotationUnderLoad(t *testing.T) {
	in := startUp(t, 1, "--demo", "--cert-ttl", "20s")
	in.mustCount("default/counter-1", 1)
	pkiDir := filepath.Join(in.dataDir, "pki")
	probe := leafOf(t, issueCert(t, pkiDir, "router", "probe"))
	ca, err := pki.LoadCA(pkiDir)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	workers, err := in.client.ListWorkers(context.Background(), &atev1.ListWorkersRequest{})
	if err != nil || len(workers.GetWorkers()) != 1 {
		t.Fatalf("workers: %v, %v", workers, err)
	}
	tunnel := workers.GetWorkers()[0].GetTunnelAddress()

	const (
		rate     = 20
		duration = 60 * time.Second
	)
	var (
		ok, failed atomic.Int64
		mu         sync.Mutex
		failures   []string
		serials    = map[string]map[string]bool{"api": {}, "tunnel": {}}
	)
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var wg sync.WaitGroup
	// The load: paced, each request on its own goroutine so a slow one
	// does not lower the rate.
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second / rate)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, body, _, err := in.request(http.MethodGet, "default/counter-1", "/", "")
				if err == nil && code == http.StatusOK && strings.HasPrefix(body, "count=") {
					ok.Add(1)
					return
				}
				failed.Add(1)
				mu.Lock()
				failures = append(failures, fmt.Sprintf("%d %q %v", code, body, err))
				mu.Unlock()
			}()
		}
	}()
	// New handshakes, once a second, record which certificates the API
	// server and the tunnel present.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			for name, addr := range map[string]string{"api": in.apiAddr, "tunnel": tunnel} {
				want, proto := auth.ComponentNode, "http/1.1"
				if name == "api" {
					want, proto = auth.ComponentAPIServer, "h2"
				}
				if leaf, err := tlsProbe(addr, probeConfig(probe, roots, want, proto)); err == nil {
					mu.Lock()
					serials[name][leaf.SerialNumber.String()] = true
					mu.Unlock()
				} else {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("handshake with %s: %v", name, err))
					mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	wg.Wait()
	t.Logf("%d requests answered, %d failed; API server certificates seen %d, tunnel's %d",
		ok.Load(), failed.Load(), len(serials["api"]), len(serials["tunnel"]))
	if failed.Load() > 0 || len(failures) > 0 {
		t.Fatalf("%d requests failed during rotation: %v", failed.Load(), failures)
	}
	if ok.Load() < rate*int64(duration/time.Second)*9/10 {
		t.Fatalf("only %d requests in %s, want about %d", ok.Load(), duration, rate*int64(duration/time.Second))
	}
	for name, seen := range serials {
		if len(seen) < 4 {
			t.Errorf("%s: %d certificates seen in %s, want ≥4 (rotations every ~13 s)", name, len(seen), duration)
		}
	}
	renewed := map[string]int{}
	for _, rec := range in.logRecords("certificate renewed") {
		id, _ := rec["identity"].(string)
		renewed[id]++
	}
	for _, id := range []string{"apiserver/up", "router/up", "node/local"} {
		// The first issue is not logged (OnRenew is set after it).
		if renewed[id] < 4 {
			t.Errorf("%s renewed %d times, want ≥4: %v", id, renewed[id], renewed)
		}
	}
	// After the load: still answering, over connections and leaves made since.
	testwait.Until(t, "the actor answers after the rotations", func() bool {
		code, _, _, err := in.request(http.MethodGet, "default/counter-1", "/", "")
		return err == nil && code == http.StatusOK
	})
}
