package pki

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/tunnelproto"
)

// nodeTunnel serves a worker tunnel with node's certificate, requiring a
// router's or API server's, and counts the requests that reached it.
func nodeTunnel(t *testing.T, ca *CA, node string, hits *atomic.Int64) string {
	t.Helper()
	tr := &Transport{Source: source(t, ca, id(auth.ComponentNode, node)), TrustDomain: auth.DefaultTrustDomain}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Not httptest's StartTLS: it would put its own certificate first.
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "tunnel of "+node)
	}), ErrorLog: log.New(io.Discard, "", 0)}
	go func() {
		_ = srv.Serve(tls.NewListener(ln, tr.HTTPServerConfig(auth.ComponentRouter, auth.ComponentAPIServer)))
	}()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// TestNodeTransportTrustsOnlyTheRegisteringNode attacks from a node: node
// b's certificate is valid and its tunnel answers at an address the
// router was told belongs to a worker of node a (b claimed the address,
// or stands in front of it). The router's request for a's worker fails
// at the handshake and b's tunnel sees nothing; the same request
// reaches a's own tunnel, and a request naming no node is refused.
func TestNodeTransportTrustsOnlyTheRegisteringNode(t *testing.T) {
	ca := newCA(t)
	var hitsA, hitsB atomic.Int64
	addrA, addrB := nodeTunnel(t, ca, "a", &hitsA), nodeTunnel(t, ca, "b", &hitsB)
	router := &Transport{Source: source(t, ca, id(auth.ComponentRouter, "r")), TrustDomain: auth.DefaultTrustDomain}
	base := http.DefaultTransport.(*http.Transport).Clone()
	nt := router.NewNodeTransport(base)
	t.Cleanup(nt.CloseIdleConnections)
	client := &http.Client{Transport: nt}
	post := func(ctx context.Context, addr string) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+addr+"/", strings.NewReader("secret request body"))
		if err != nil {
			t.Fatal(err)
		}
		res, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return string(b), err
	}
	ctx := t.Context()

	if _, err := post(tunnelproto.WithNode(ctx, "a"), addrB); err == nil || !strings.Contains(err.Error(), "node/b is not node/a") {
		t.Errorf("a's worker at b's tunnel: %v, want the handshake refused", err)
	}
	if n := hitsB.Load(); n != 0 {
		t.Errorf("b's tunnel received %d requests meant for a's worker", n)
	}
	// A connection verified as a is not reused for b, nor the reverse:
	// pools are per node.
	if got, err := post(tunnelproto.WithNode(ctx, "a"), addrA); err != nil || got != "tunnel of a" {
		t.Errorf("a's worker at a's tunnel: %q, %v", got, err)
	}
	if _, err := post(tunnelproto.WithNode(ctx, "b"), addrA); err == nil {
		t.Errorf("b's worker at a's tunnel (a connection to a is pooled): accepted")
	}
	if got, err := post(tunnelproto.WithNode(ctx, "b"), addrB); err != nil || got != "tunnel of b" {
		t.Errorf("b's worker at b's tunnel: %q, %v", got, err)
	}
	if _, err := post(ctx, addrA); !errors.Is(err, ErrNoNode) {
		t.Errorf("a request naming no node: %v, want ErrNoNode", err)
	}
	if a, b := hitsA.Load(), hitsB.Load(); a != 1 || b != 1 {
		t.Errorf("tunnels received a=%d b=%d requests, want 1 each (their own node's)", a, b)
	}
	if router.NewNodeTransport(base) == nil || (*Transport)(nil).NewNodeTransport(base) != nil {
		t.Error("NewNodeTransport: want one with TLS, none in plaintext")
	}
}

// TestNodeDialOptionTrustsOnlyThatNode: the API server dials the agent at
// the address node a registered; node b's agent answering there is
// refused, a's own is not.
func TestNodeDialOptionTrustsOnlyThatNode(t *testing.T) {
	ca := newCA(t)
	agentOf := func(node string) string {
		srvT := &Transport{Source: source(t, ca, id(auth.ComponentNode, node)), TrustDomain: auth.DefaultTrustDomain}
		gs := grpc.NewServer(srvT.ServerOptions(ClientCertRequired, auth.ComponentAPIServer)...)
		healthpb.RegisterHealthServer(gs, health.NewServer())
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = gs.Serve(ln) }()
		t.Cleanup(gs.Stop)
		return ln.Addr().String()
	}
	api := &Transport{Source: source(t, ca, id(auth.ComponentAPIServer, "api-0")), TrustDomain: auth.DefaultTrustDomain}
	check := func(node, addr string) error {
		conn, err := grpc.NewClient(addr, api.NodeDialOption(node))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, err = healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
		return err
	}
	addrA, addrB := agentOf("a"), agentOf("b")
	if err := check("a", addrB); err == nil || !strings.Contains(err.Error(), "node/b is not node/a") {
		t.Errorf("node a's agent address answered by b: %v, want refused", err)
	}
	if err := check("a", addrA); err != nil {
		t.Errorf("node a's own agent: %v", err)
	}
}
