package identity

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/go-jose/go-jose/v4/jwt"

	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/store"
)

// SubjectPrefix starts every token's sub: "actor:<atespace>/<name>".
const SubjectPrefix = "actor:"

// MaxAudience bounds a requested audience, in bytes.
const MaxAudience = 256

// Errors Mint returns besides nodeapi.ErrNotHosted (the worker does
// not host that actor incarnation now: nothing minted); callers match
// them with errors.Is.
var (
	// ErrInvalid: a bad request (audience).
	ErrInvalid = errors.New("invalid token request")
	// ErrNoIssuer: no issuer URL is configured (ate apiserver without
	// --issuer-url or --http-addr).
	ErrNoIssuer = errors.New("no issuer URL configured; start the API server with --issuer-url or --http-addr")
)

// Claims are a minted token's claims: the registered ones plus the
// actor's incarnation uid and template.
type Claims struct {
	jwt.Claims
	// UID is the actor's uid: an actor deleted and re-created under its
	// name gets another, so a verifier can tell incarnations apart.
	UID string `json:"uid"`
	// Template is the actor's template name, in its atespace.
	Template string `json:"template"`
}

// Token is a minted token and its expiry; POST /v1/token's answer.
type Token struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// TokenRequest is POST /v1/token's body; empty or absent means the
// default audience (the issuer URL).
type TokenRequest struct {
	Audience string `json:"audience,omitempty"`
}

// Issuer mints actor tokens (after checking the worker's assignment in
// the record store) and serves discovery. Safe for concurrent use.
type Issuer struct {
	st   store.Store
	ring *KeyRing
	cfg  Config

	mu     sync.Mutex
	issuer string
}

// New returns an issuer over st whose tokens name issuerURL as iss; it
// may be empty until SetIssuerURL (the HTTP listener's address may not
// be known yet), minting fails with ErrNoIssuer meanwhile.
func New(st store.Store, issuerURL string, cfg Config) *Issuer {
	cfg = cfg.withDefaults()
	return &Issuer{st: st, ring: NewKeyRing(st, cfg), cfg: cfg, issuer: strings.TrimSuffix(issuerURL, "/")}
}

// SetIssuerURL sets the iss of tokens minted from now on.
func (i *Issuer) SetIssuerURL(u string) {
	i.mu.Lock()
	i.issuer = strings.TrimSuffix(u, "/")
	i.mu.Unlock()
}

// IssuerURL returns the iss tokens carry ("" when none is set).
func (i *Issuer) IssuerURL() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.issuer
}

// KeyRing returns the issuer's key ring.
func (i *Issuer) KeyRing() *KeyRing { return i.ring }

// Run maintains the signing keys until ctx ends (KeyRing.Run).
func (i *Issuer) Run(ctx context.Context) error { return i.ring.Run(ctx) }

// Mint signs a token for the actor incarnation actorUID hosted by worker,
// for audience (the issuer URL when empty), valid from now for TokenTTL.
// It first checks in the record store that worker is assigned to
// actorUID and the actor (same uid) points back at worker, RESUMING or
// RUNNING: the assignment, not where the request came from, names the
// subject. Errors: nodeapi.ErrNotHosted, ErrInvalid, ErrNoIssuer, the store's.
func (i *Issuer) Mint(ctx context.Context, worker, actorUID, audience string) (*Token, error) {
	iss := i.IssuerURL()
	if iss == "" {
		return nil, ErrNoIssuer
	}
	if audience == "" {
		audience = iss
	}
	if err := validAudience(audience); err != nil {
		return nil, err
	}
	act, err := HostedActor(ctx, i.st, worker, actorUID)
	if err != nil {
		return nil, err
	}
	signer, _, err := i.ring.Signer(ctx)
	if err != nil {
		return nil, err
	}
	now := i.cfg.Now()
	exp := now.Add(i.cfg.TokenTTL)
	jti := make([]byte, 16)
	_, _ = rand.Read(jti)
	c := Claims{
		Claims: jwt.Claims{
			Issuer:    iss,
			Subject:   SubjectPrefix + act.Key().String(),
			Audience:  jwt.Audience{audience},
			Expiry:    jwt.NewNumericDate(exp),
			NotBefore: jwt.NewNumericDate(now),
			IssuedAt:  jwt.NewNumericDate(now),
			ID:        base64.RawURLEncoding.EncodeToString(jti),
		},
		UID:      act.UID,
		Template: act.Template,
	}
	tok, err := jwt.Signed(signer).Claims(c).Serialize()
	if err != nil {
		return nil, fmt.Errorf("sign token: %w", err)
	}
	// NumericDate has whole seconds: the answer says the token's own.
	return &Token{Token: tok, ExpiresAt: c.Expiry.Time().UTC()}, nil
}

// HostedActor returns the actor worker hosts if it is the incarnation
// actorUID and the assignment holds both ways (worker → actor uid, actor
// → worker) in the record store, with the actor RESUMING or RUNNING.
// Errors: nodeapi.ErrNotHosted, the store's (ErrUnavailable …).
func HostedActor(ctx context.Context, st store.Store, worker, actorUID string) (*store.Actor, error) {
	if worker == "" || actorUID == "" {
		return nil, fmt.Errorf("worker %q, actor uid %q: %w", worker, actorUID, nodeapi.ErrNotHosted)
	}
	w, err := st.GetWorker(ctx, worker)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("worker %s is not registered: %w", worker, nodeapi.ErrNotHosted)
	}
	if err != nil {
		return nil, fmt.Errorf("read worker %s: %w", worker, err)
	}
	if w.ActorUID != actorUID || w.Actor.IsZero() {
		return nil, fmt.Errorf("worker %s no longer hosts actor uid %s: %w", worker, actorUID, nodeapi.ErrNotHosted)
	}
	act, err := st.GetActor(ctx, w.Actor)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("actor %s is gone: %w", w.Actor, nodeapi.ErrNotHosted)
	}
	if err != nil {
		return nil, fmt.Errorf("read actor %s: %w", w.Actor, err)
	}
	if act.UID != actorUID || act.Worker != worker {
		return nil, fmt.Errorf("actor %s (uid %s) is not on worker %s now: %w", w.Actor, actorUID, worker, nodeapi.ErrNotHosted)
	}
	if act.State != store.Running && act.State != store.Resuming {
		return nil, fmt.Errorf("actor %s is %s: %w", w.Actor, act.State, nodeapi.ErrNotHosted)
	}
	return act, nil
}

// validAudience: non-empty printable text of at most MaxAudience bytes.
func validAudience(a string) error {
	if len(a) > MaxAudience {
		return fmt.Errorf("audience is %d bytes, at most %d are allowed: %w", len(a), MaxAudience, ErrInvalid)
	}
	for _, r := range a {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("audience %q holds a control character: %w", a, ErrInvalid)
		}
	}
	return nil
}

// MintSelf is the self-service token call: the actor incarnation
// actorUID on worker sent body, a TokenRequest (may be empty). Errors as
// Mint; ErrInvalid also for a body that is not a TokenRequest.
func (i *Issuer) MintSelf(ctx context.Context, worker, actorUID string, body []byte) (*Token, error) {
	var req TokenRequest
	if len(bytes.TrimSpace(body)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return nil, fmt.Errorf("token request body: %v (want {\"audience\": \"...\"} or nothing): %w", err, ErrInvalid)
		}
	}
	return i.Mint(ctx, worker, actorUID, req.Audience)
}
