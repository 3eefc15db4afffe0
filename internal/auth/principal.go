// Package auth says who is calling and what they may do: the principal a
// call carries (from a client certificate or a bearer token), component
// identities, and the authorisation of Control and NodeRegistry RPCs.
package auth

import (
	"context"
	"fmt"
	"net/url"
	"strings"
)

// Component is a Substrate component kind that proves itself with a
// client certificate (docs/security.md).
type Component string

// The components. A certificate names exactly one.
const (
	ComponentAPIServer  Component = "apiserver"
	ComponentNode       Component = "node"
	ComponentRouter     Component = "router"
	ComponentController Component = "controller"
)

// Valid reports whether c is one of the components above.
func (c Component) Valid() bool {
	switch c {
	case ComponentAPIServer, ComponentNode, ComponentRouter, ComponentController:
		return true
	}
	return false
}

// DefaultTrustDomain is the SPIFFE trust domain of identities when none is
// configured.
const DefaultTrustDomain = "ate.local"

// Identity is a component's identity: its kind and its instance name (a
// node's name, which the node registry binds it to; any name for the
// others). It travels as a certificate's URI SAN in SPIFFE form,
// spiffe://<trust domain>/ate/<component>/<name> (SPIFFE ID spec,
// github.com/spiffe/spiffe/blob/main/standards/SPIFFE-ID.md).
type Identity struct {
	Component Component
	Name      string
}

// URI is id's SPIFFE ID in trustDomain.
func (id Identity) URI(trustDomain string) *url.URL {
	return &url.URL{Scheme: "spiffe", Host: trustDomain, Path: "/ate/" + string(id.Component) + "/" + id.Name}
}

// String is "<component>/<name>".
func (id Identity) String() string { return string(id.Component) + "/" + id.Name }

// ParseIdentityURI reads an identity from a SPIFFE ID made by URI; it
// returns an error for another scheme, trust domain, path shape or an
// unknown component.
func ParseIdentityURI(u *url.URL, trustDomain string) (Identity, error) {
	if u.Scheme != "spiffe" || u.Host != trustDomain {
		return Identity{}, fmt.Errorf("identity %q: not a SPIFFE ID of trust domain %q", u, trustDomain)
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	if len(parts) != 3 || parts[0] != "ate" || parts[2] == "" {
		return Identity{}, fmt.Errorf("identity %q: want spiffe://%s/ate/<component>/<name>", u, trustDomain)
	}
	id := Identity{Component: Component(parts[1]), Name: parts[2]}
	if !id.Component.Valid() {
		return Identity{}, fmt.Errorf("identity %q: unknown component %q", u, parts[1])
	}
	return id, nil
}

// Principal is who a call comes from, established once per call before any
// handler runs: a component by its client certificate, or a user by a
// bearer token.
type Principal struct {
	// Component is set when the caller proved a component identity with a
	// client certificate; Name and Groups are then empty.
	Component *Identity
	// Name is a user's subject, the name role bindings match: a static
	// token's user as written in the token file ("ate:admin" for ate up's
	// admin token); an OIDC JWT's --oidc-username-claim with
	// --oidc-username-prefix before it (kube-apiserver's semantics: by
	// default "<issuer>#<sub>"; with the prefix "-" a Kubernetes
	// ServiceAccount token's "system:serviceaccount:<namespace>:<name>").
	Name string
	// Groups are the user's groups (static token file, the JWT's groups
	// claim).
	Groups []string
}

// String names p for logs and audit: the component identity or the user.
func (p *Principal) String() string {
	if p == nil {
		return "anonymous"
	}
	if p.Component != nil {
		return "component:" + p.Component.String()
	}
	return p.Name
}

type principalKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal ctx carries, if any.
func FromContext(ctx context.Context) (*Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(*Principal)
	return p, ok && p != nil
}
