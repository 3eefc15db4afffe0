package router

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/coalesce"
	"substrate.dev/ate/internal/names"
)

// Router ingress policy (docs/security.md, Router ingress policy): an
// actor whose template's ingress.policy is "token" is reached only by
// requests carrying Authorization: Bearer <token> with a token the
// control plane accepts for the actor's atespace (ReviewIngressToken). The
// check comes before anything that could wake the actor: the warm path
// checks before counting the request; the cold path checks the actor's
// policy (remembered, or looked up without parking) before parking, and
// the shared resume checks again, on the fresh policy its Lookup
// returns, before it calls Resume. A request that fails the check is
// answered 401 with WWW-Authenticate: Bearer realm="ate".

// HeaderIngressSubject is set on requests to an actor whose template's
// ingress policy is "token": who the bearer token names, as the control
// plane said ("ingresstoken:<atespace>/<name>", or a user's subject).
// The router deletes any value a client sent, so an actor may trust it.
const HeaderIngressSubject = "Ate-Ingress-Subject"

// IngressReview is the control plane's verdict on one bearer token for
// one atespace.
type IngressReview struct {
	Allowed bool
	// Subject names who the token is, when Allowed.
	Subject string
}

// IngressReviewer checks bearer tokens for the "token" ingress policy. A
// Resolver that is also an IngressReviewer (ControlResolver is) is used by
// NewHandler; without one, every request to a "token" actor is refused.
// Implementations are safe for concurrent use.
type IngressReviewer interface {
	// ReviewIngress says whether token may reach atespace's actors. A
	// token that is not accepted is Allowed false with a nil error;
	// errors mean the control plane did not answer (the Resolver's
	// sentinels), and are never cached.
	ReviewIngress(ctx context.Context, atespace, token string) (IngressReview, error)
}

// Defaults of the ingress guard.
const (
	// DefaultIngressCacheTTL is how long a review (accepted or refused)
	// and an actor's ingress policy are remembered: a deleted token
	// still works for at most this long on a router that accepted it.
	DefaultIngressCacheTTL = 10 * time.Second
	// DefaultIngressCacheMax bounds the remembered reviews, and
	// separately the remembered policies.
	DefaultIngressCacheMax = 10000
	// ingressReviewTimeout bounds one ReviewIngressToken call (a store
	// read, or an OIDC verification with cached keys).
	ingressReviewTimeout = 5 * time.Second
)

// Errors of the ingress check; both are answered 401.
var (
	// errNoBearer: the actor's policy wants a bearer token and the
	// request has none (no Authorization header, or another scheme).
	errNoBearer = errors.New("no bearer token")
	// errBearerRefused: the control plane did not accept the token for
	// the actor's atespace.
	errBearerRefused = errors.New("bearer token not accepted")
)

// ingressRefusal is a request refused by policy; it unwraps to
// errNoBearer or errBearerRefused. A shared resume refused for its
// leader's request carries the policy, so that a request that joined it
// can tell whether its own credentials would have done.
type ingressRefusal struct {
	policy Policy
	err    error
}

func (e *ingressRefusal) Error() string {
	return fmt.Sprintf("ingress policy %s: %v", e.policy.Ingress, e.err)
}

func (e *ingressRefusal) Unwrap() error { return e.err }

// ingressGuard checks requests' bearer tokens against actors' ingress
// policies, remembering the control plane's reviews (keyed by atespace
// and the token's SHA-256, never the token) and actors' policies for
// ttl. Both tables are bounded by limit: when full, expired entries go
// first, then arbitrary ones. Safe for concurrent use.
type ingressGuard struct {
	reviewer IngressReviewer
	ttl      time.Duration
	limit    int
	now      func() time.Time
	// flights runs one review per (atespace, token hash) at a time.
	flights coalesce.Group

	mu       sync.Mutex
	reviews  map[reviewKey]reviewEntry
	policies map[names.ActorKey]policyEntry
}

type reviewKey struct {
	atespace string
	hash     [sha256.Size]byte
}

type reviewEntry struct {
	review  IngressReview
	expires time.Time
}

type policyEntry struct {
	policy  Policy
	expires time.Time
}

func newIngressGuard(reviewer IngressReviewer, cfg Config) *ingressGuard {
	return &ingressGuard{
		reviewer: reviewer,
		ttl:      cfg.IngressCacheTTL,
		limit:    cfg.IngressCacheMax,
		now:      time.Now,
		flights:  coalesce.Group{Timeout: ingressReviewTimeout},
		reviews:  make(map[reviewKey]reviewEntry),
		policies: make(map[names.ActorKey]policyEntry),
	}
}

// credentials are one request's: what it presented, and to whom.
type credentials struct {
	guard    *ingressGuard
	atespace string
	// authorization is the request's Authorization header.
	authorization string
}

// check returns nil with a zero review when p lets anyone in, the
// review when the request's bearer token is accepted, and otherwise an
// *ingressRefusal, or the reviewer's error when the control plane did
// not answer. It only reads c, so a shared resume may call it from its
// own goroutine.
func (c credentials) check(ctx context.Context, p Policy) (IngressReview, error) {
	if p.Ingress == auth.IngressPublic {
		return IngressReview{}, nil
	}
	token, ok := auth.BearerToken(c.authorization)
	if !ok {
		return IngressReview{}, &ingressRefusal{policy: p, err: errNoBearer}
	}
	r, err := c.guard.review(ctx, c.atespace, token)
	if err != nil {
		return IngressReview{}, fmt.Errorf("review bearer token: %w", err)
	}
	if !r.Allowed {
		return IngressReview{}, &ingressRefusal{policy: p, err: errBearerRefused}
	}
	return r, nil
}

// review returns the control plane's verdict on token for atespace,
// from the cache while it is fresh; concurrent misses for one token
// share one call.
func (g *ingressGuard) review(ctx context.Context, atespace, token string) (IngressReview, error) {
	if g.reviewer == nil {
		return IngressReview{}, nil
	}
	k := reviewKey{atespace: atespace, hash: hashToken(token)}
	g.mu.Lock()
	e, ok := g.reviews[k]
	g.mu.Unlock()
	if ok && g.now().Before(e.expires) {
		return e.review, nil
	}
	return g.fetch(ctx, k, token)
}

// fetch asks the reviewer about token (whose key is k), once for all
// concurrent callers, and caches the verdict. Apart from review so that
// the warm path does not pay for the closure's captures.
func (g *ingressGuard) fetch(ctx context.Context, k reviewKey, token string) (IngressReview, error) {
	v, _, err := g.flights.Do(ctx, k.atespace+"/"+string(k.hash[:]), func(ctx context.Context) (any, error) {
		r, err := g.reviewer.ReviewIngress(ctx, k.atespace, token)
		if err != nil {
			return nil, err
		}
		g.mu.Lock()
		makeRoom(g.reviews, g.limit, g.now(), func(e reviewEntry) time.Time { return e.expires })
		g.reviews[k] = reviewEntry{review: r, expires: g.now().Add(g.ttl)}
		g.mu.Unlock()
		return r, nil
	})
	if err != nil {
		return IngressReview{}, err
	}
	return v.(IngressReview), nil
}

// hashToken is the SHA-256 of token, without a heap copy of a token of
// ordinary length (ingress tokens, JWTs of a few claims).
func hashToken(token string) [sha256.Size]byte {
	var buf [1024]byte
	if len(token) <= len(buf) {
		return sha256.Sum256(append(buf[:0], token...))
	}
	return sha256.Sum256([]byte(token))
}

// remember records key's policy as the control plane just reported it.
func (g *ingressGuard) remember(key names.ActorKey, p Policy) {
	g.mu.Lock()
	defer g.mu.Unlock()
	makeRoom(g.policies, g.limit, g.now(), func(e policyEntry) time.Time { return e.expires })
	g.policies[key] = policyEntry{policy: p, expires: g.now().Add(g.ttl)}
}

// policy returns key's policy if it was reported within the TTL.
func (g *ingressGuard) policy(key names.ActorKey) (Policy, bool) {
	g.mu.Lock()
	e, ok := g.policies[key]
	g.mu.Unlock()
	if !ok || !g.now().Before(e.expires) {
		return Policy{}, false
	}
	return e.policy, true
}

// makeRoom makes m hold fewer than limit entries: expired ones (as
// expires says, against now) first, then arbitrary ones (Go's map
// order). The caller holds the lock guarding m.
func makeRoom[K comparable, V any](m map[K]V, limit int, now time.Time, expires func(V) time.Time) {
	if len(m) < limit {
		return
	}
	for k, v := range m {
		if !now.Before(expires(v)) {
			delete(m, k)
		}
	}
	for k := range m {
		if len(m) < limit {
			return
		}
		delete(m, k)
	}
}
