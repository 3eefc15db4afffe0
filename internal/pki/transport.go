package pki

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"substrate.dev/ate/internal/auth"
)

// Transport is one component's TLS: the source of its credentials and
// its trust domain. A nil *Transport is plaintext (--insecure): every
// method then returns what a listener or dialer without TLS uses.
type Transport struct {
	Source      Source
	TrustDomain string
}

// Settings are a component's TLS flags: --tls-dir, --insecure,
// --trust-domain.
type Settings struct {
	// Dir holds ca.crt, tls.crt and tls.key (FileSource).
	Dir string
	// Insecure serves and dials in plaintext.
	Insecure bool
	// TrustDomain of identities; default auth.DefaultTrustDomain.
	TrustDomain string
	// BootstrapDir (a node's --tls-bootstrap-dir) holds a ServiceAccount
	// token (TokenFile) and ca.crt: the leaf is asked of the API server
	// (LoadBootstrap) instead of read from Dir.
	BootstrapDir string
}

// ErrNoTLSSettings is returned by Load when neither a TLS directory nor
// plaintext was asked for.
var ErrNoTLSSettings = errors.New("no transport security configured: pass --tls-dir DIR (a directory holding ca.crt, tls.crt and tls.key, e.g. from `ate certs issue` or a kubernetes.io/tls Secret) or --insecure for plaintext")

// Load returns the Transport s asks for: nil with Insecure, a
// FileSource on Dir (re-read until ctx ends) otherwise; the leaf must
// name component (a node's certificate must also name the node: that is
// checked by the API server). Errors: ErrNoTLSSettings, both given,
// NewFileSource's, a leaf of another component.
func (s Settings) Load(ctx context.Context, component auth.Component, log *slog.Logger) (*Transport, error) {
	td := s.TrustDomain
	if td == "" {
		td = auth.DefaultTrustDomain
	}
	switch {
	case s.BootstrapDir != "":
		return nil, errors.New("--tls-bootstrap-dir: only a node obtains its certificate with a token (LoadBootstrap)")
	case s.Insecure && s.Dir != "":
		return nil, errors.New("--insecure and --tls-dir are both given: pass one")
	case s.Insecure:
		return nil, nil
	case s.Dir == "":
		return nil, ErrNoTLSSettings
	}
	src, err := NewFileSource(ctx, s.Dir, log)
	if err != nil {
		return nil, err
	}
	c, _ := src.Certificate()
	id, err := identityOf(c.Leaf, td)
	if err != nil {
		return nil, fmt.Errorf("--tls-dir %s: %s: %w", s.Dir, CertFile, err)
	}
	if id.Component != component {
		return nil, fmt.Errorf("--tls-dir %s: the certificate is %s's, not a %s's (issue one with `ate certs issue --component %s`)", s.Dir, id, component, component)
	}
	return &Transport{Source: src, TrustDomain: td}, nil
}

// Identity is the identity of t's current leaf; false for plaintext.
func (t *Transport) Identity() (auth.Identity, bool) {
	if t == nil {
		return auth.Identity{}, false
	}
	c, err := t.Source.Certificate()
	if err != nil {
		return auth.Identity{}, false
	}
	id, err := identityOf(c.Leaf, t.TrustDomain)
	return id, err == nil
}

// ServerOptions are the gRPC server options of a listener: TLS per mode
// and allow (ServerConfig) and the interceptors that put a component
// caller's principal into the call's context (PrincipalInterceptors).
// Plaintext: none.
func (t *Transport) ServerOptions(mode ClientCerts, allow ...auth.Component) []grpc.ServerOption {
	if t == nil {
		return nil
	}
	return append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(ServerConfig(t.Source, t.TrustDomain, mode, allow...)))},
		t.PrincipalInterceptors()...)
}

// DialOption is the transport credentials of a connection to a server of
// component server: ClientConfig, or plaintext.
func (t *Transport) DialOption(server auth.Component) grpc.DialOption {
	if t == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(ClientConfig(t.Source, t.TrustDomain, server)))
}

// HTTPServerConfig is the TLS config of an HTTP listener (the worker
// tunnel) that requires a client certificate of one of allow's
// components, speaking HTTP/1.1 (upgrades and full-duplex bodies); nil
// for plaintext.
func (t *Transport) HTTPServerConfig(allow ...auth.Component) *tls.Config {
	if t == nil {
		return nil
	}
	c := ServerConfig(t.Source, t.TrustDomain, ClientCertRequired, allow...)
	c.NextProtos = []string{"http/1.1"}
	return c
}

// HTTPClientConfig is the TLS config of HTTP requests to a server of
// component server (the router and the alarm scheduler to worker
// tunnels); nil for plaintext.
func (t *Transport) HTTPClientConfig(server auth.Component) *tls.Config {
	if t == nil {
		return nil
	}
	c := ClientConfig(t.Source, t.TrustDomain, server)
	c.NextProtos = []string{"http/1.1"}
	return c
}

// NodeDialOption is DialOption for the agent of node: the server must
// prove it is that very node.
func (t *Transport) NodeDialOption(node string) grpc.DialOption {
	if t == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(ClientConfigFor(t.Source, t.TrustDomain,
		auth.Identity{Component: auth.ComponentNode, Name: node})))
}

// PrincipalInterceptors put the principal of a caller with a component
// certificate into the call's context (auth.NewContext), for handlers
// and the API's authorisation to read with auth.FromContext. Calls
// without one pass unchanged: a bearer token decides for them. The one
// place that does this, so that authorisation can take it over.
func (t *Transport) PrincipalInterceptors() []grpc.ServerOption {
	if t == nil {
		return nil
	}
	with := func(ctx context.Context) context.Context {
		if p, ok := PrincipalFromPeer(ctx, t.TrustDomain); ok {
			return auth.NewContext(ctx, p)
		}
		return ctx
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(with(ctx), req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return h(srv, &contextStream{ServerStream: ss, ctx: with(ss.Context())})
		}),
	}
}

// RequireComponents are interceptors refusing, with PermissionDenied, a
// call whose client certificate names none of allow's components (the
// node agent: only the API server may call it). Plaintext: none.
func (t *Transport) RequireComponents(allow ...auth.Component) []grpc.ServerOption {
	if t == nil {
		return nil
	}
	check := func(ctx context.Context, method string) error {
		p, ok := PrincipalFromPeer(ctx, t.TrustDomain)
		if !ok {
			return status.Errorf(codes.Unauthenticated, "%s needs a component client certificate", method)
		}
		if !slices.Contains(allow, p.Component.Component) {
			return status.Errorf(codes.PermissionDenied, "%s may not call %s (only %v)", p, method, allow)
		}
		return nil
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := check(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := check(ss.Context(), info.FullMethod); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}

type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }
