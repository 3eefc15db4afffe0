package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
)

// IngressPolicy is who the router lets reach a template's actors
// (ActorTemplateSpec.ingress.policy; docs/security.md, Router ingress
// policy). The zero value is IngressPublic.
type IngressPolicy uint8

// Ingress policies.
const (
	// IngressPublic: anyone who reaches the router (the default).
	IngressPublic IngressPolicy = iota
	// IngressToken: a request must carry Authorization: Bearer <token>
	// with a token the API server's ReviewIngressToken accepts for the
	// actor's atespace.
	IngressToken
)

// Wire values of IngressPolicy, as a template spells them.
const (
	IngressPolicyPublic = "public"
	IngressPolicyToken  = "token"
)

// ParseIngressPolicy reads a template's ingress.policy: "" or "public" is
// IngressPublic, "token" IngressToken; anything else is an error naming
// the field and the accepted values.
func ParseIngressPolicy(s string) (IngressPolicy, error) {
	switch s {
	case "", IngressPolicyPublic:
		return IngressPublic, nil
	case IngressPolicyToken:
		return IngressToken, nil
	}
	return IngressPublic, fmt.Errorf("ingress.policy %q: want %q (the default) or %q", s, IngressPolicyPublic, IngressPolicyToken)
}

// String is the wire value.
func (p IngressPolicy) String() string {
	if p == IngressToken {
		return IngressPolicyToken
	}
	return IngressPolicyPublic
}

// TokenAuthenticator turns a bearer token into the principal it
// authenticates. The API server's ReviewIngressToken consults one, when
// configured, for tokens that are not ingress tokens (an OIDC JWT, a
// static token), so the router's "token" policy can accept them too.
//
// Authenticate returns an error for a token it does not accept
// (malformed, unknown, expired, wrong audience or signature) or cannot
// check now; ReviewIngressToken answers "not allowed" to both.
type TokenAuthenticator interface {
	Authenticate(ctx context.Context, token string) (*Principal, error)
}

// ingressTokenPrefix marks ingress tokens, so one pasted in the wrong
// place (a log, a ticket) is recognisable, and ReviewIngressToken can
// tell them from JWTs without a lookup.
const ingressTokenPrefix = "ate_it_"

// NewIngressToken returns a fresh random ingress token: the prefix
// "ate_it_" and 32 random bytes in unpadded base64url (50 characters
// in all), from crypto/rand.
func NewIngressToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return ingressTokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// IsIngressToken reports whether token has the shape NewIngressToken
// makes (not whether it is valid).
func IsIngressToken(token string) bool { return strings.HasPrefix(token, ingressTokenPrefix) }

// HashToken is the hex SHA-256 of token: what the store keeps of an
// ingress token, and the key the router caches reviews under, so neither
// holds the secret itself. A 256-bit random token needs no slow hash.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// BearerToken returns the token of an Authorization header value
// "Bearer <token>" (the scheme case-insensitive, RFC 6750 section 2.1),
// and false when the value is empty, another scheme, or has no token.
func BearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
