package auth

import (
	"context"
	"sync"
)

// readScope answers, for one call, which atespaces its caller may read:
// what a handler needs to leave out of an answer the names of objects in
// other atespaces (an eviction crosses atespaces: the actor evicted and
// the actor it made room for may belong to different tenants). The role
// bindings are read at most once per call, on first use.
type readScope struct {
	a      *Authorizer
	p      *Principal
	method string

	once   sync.Once
	grants Grants
	err    error
}

type readScopeKey struct{}

// withReadScope returns ctx carrying the read scope of p's call.
func (a *Authorizer) withReadScope(ctx context.Context, p *Principal, method string) context.Context {
	return context.WithValue(ctx, readScopeKey{}, &readScope{a: a, p: p, method: method})
}

// MayRead reports whether the caller of the call ctx belongs to may read
// atespace: a component (the router, the controller: they relay no names
// to tenants), a user with any role there or a role bound in every
// atespace. Bindings that cannot be read answer false. A call the
// Authorizer did not see — an API server run without authentication,
// where every caller may do everything — answers true.
func MayRead(ctx context.Context, atespace string) bool {
	s, ok := ctx.Value(readScopeKey{}).(*readScope)
	if !ok {
		return true
	}
	if s.p == nil {
		return false
	}
	if s.p.Component != nil {
		return true
	}
	s.once.Do(func() { s.grants, s.err = s.a.grants(ctx, s.p, s.method) })
	return s.err == nil && s.grants.CanRead(atespace)
}
