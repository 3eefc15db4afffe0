package pki

import (
	"errors"
	"fmt"
	"net/http"
	"sync"

	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/tunnelproto"
)

// ErrNoNode: a request to a worker tunnel did not say which node
// registered the worker (tunnelproto.WithNode), so no certificate may be
// trusted for it.
var ErrNoNode = errors.New("request to a worker tunnel names no node")

// NodeTransport carries HTTP requests to worker tunnels over mutual TLS
// and accepts, for each request, only the certificate of the node its
// context names (tunnelproto.WithNode): the node that registered the
// worker. A certificate of any other node — one that claimed the
// address, or stands between the caller and it — fails the handshake
// before a byte of the request is sent.
//
// Connections are pooled per node (one http.Transport each, cloned from
// the base given to NewNodeTransport with this node's TLS config), so a
// connection verified as one node never carries a request meant for
// another, even at the same address. Nodes are few and long-lived; a
// departed node's transport keeps only idle connections, which close
// after the base's IdleConnTimeout. Safe for concurrent use.
type NodeTransport struct {
	t    *Transport
	base *http.Transport

	mu sync.Mutex
	// byNode holds each node's transport, made on first use; guarded by mu.
	byNode map[string]*http.Transport
}

var _ http.RoundTripper = (*NodeTransport)(nil)

// NewNodeTransport returns t's NodeTransport over clones of base (whose
// TLSClientConfig is replaced); nil when t is nil (plaintext: there is
// no certificate to check).
func (t *Transport) NewNodeTransport(base *http.Transport) *NodeTransport {
	if t == nil {
		return nil
	}
	return &NodeTransport{t: t, base: base, byNode: map[string]*http.Transport{}}
}

// RoundTrip implements http.RoundTripper. Errors: ErrNoNode, or the
// transport's (a handshake with another node's certificate fails).
func (n *NodeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	node, ok := tunnelproto.NodeFrom(req.Context())
	if !ok {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, fmt.Errorf("%w: %s", ErrNoNode, req.URL.Host)
	}
	return n.forNode(node).RoundTrip(req)
}

func (n *NodeTransport) forNode(node string) *http.Transport {
	n.mu.Lock()
	defer n.mu.Unlock()
	tr, ok := n.byNode[node]
	if !ok {
		tr = n.base.Clone()
		c := ClientConfigFor(n.t.Source, n.t.TrustDomain, auth.Identity{Component: auth.ComponentNode, Name: node})
		c.NextProtos = []string{"http/1.1"}
		tr.TLSClientConfig = c
		n.byNode[node] = tr
	}
	return tr
}

// CloseIdleConnections closes every node's idle connections.
func (n *NodeTransport) CloseIdleConnections() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, tr := range n.byNode {
		tr.CloseIdleConnections()
	}
}
