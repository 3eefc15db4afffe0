// Package identity is actor identity (docs/security.md, Actor identity):
// the API server signs short-lived JWTs for actors, asked through their
// worker's self-service endpoint (POST http://169.254.17.1/v1/token), and
// publishes the OpenID Connect discovery document and the JWKS a third
// party verifies them with.
//
// Signing keys (ES256) live in the record store (store.SigningKeys), so
// every API server replica signs with, and publishes, the same set. They
// rotate with an overlap: the next key is created — and so published —
// one rotation period ahead of signing (at least half a period when the
// schedule fell behind, after downtime); a key that stopped signing stays
// published until every token it signed has expired (TokenTTL plus
// Leeway), then it is deleted.
package identity

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"substrate.dev/ate/internal/store"
)

// Defaults of Config.
const (
	// DefaultTokenTTL is a minted token's lifetime: 10 minutes.
	DefaultTokenTTL = 10 * time.Minute
	// DefaultRotation is how long a key signs before the next one
	// takes over: 24 hours.
	DefaultRotation = 24 * time.Hour
	// DefaultLeeway is kept on top of TokenTTL before a retired key
	// leaves the JWKS, for verifiers whose clocks run behind: 1 minute.
	DefaultLeeway = time.Minute
)

// Algorithm is the one JWS algorithm keys sign with.
const Algorithm = jose.ES256

// Config configures a KeyRing and the Issuer around it; zero fields take
// their defaults.
type Config struct {
	// TokenTTL is a minted token's lifetime (DefaultTokenTTL).
	TokenTTL time.Duration
	// Rotation is each key's signing period (DefaultRotation).
	Rotation time.Duration
	// Leeway: DefaultLeeway.
	Leeway time.Duration
	// Now is the clock (time.Now); tests move it.
	Now func() time.Time
	// Logger: none when nil.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.TokenTTL <= 0 {
		c.TokenTTL = DefaultTokenTTL
	}
	if c.Rotation <= 0 {
		c.Rotation = DefaultRotation
	}
	if c.Leeway <= 0 {
		c.Leeway = DefaultLeeway
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// refreshEvery is how often Run reloads and maintains the keys: often
// enough that every replica sees the next key long before it signs (it
// is created at least Rotation/2 ahead) and deletes a retired one soon
// after it expired.
func (c Config) refreshEvery() time.Duration {
	return min(c.Rotation/4, c.TokenTTL/2, time.Minute)
}

// key is a parsed store.SigningKey.
type key struct {
	rec  *store.SigningKey
	priv *ecdsa.PrivateKey
}

// KeyRing is the set of signing keys in the record store, as this
// replica last read it, and their maintenance. Safe for concurrent use.
type KeyRing struct {
	st  store.SigningKeys
	cfg Config

	mu   sync.Mutex
	keys []key // by generation
	// loaded: keys were read at least once.
	loaded bool
}

// NewKeyRing returns a ring over st; nothing is read until the first
// Refresh or Signer.
func NewKeyRing(st store.SigningKeys, cfg Config) *KeyRing {
	return &KeyRing{st: st, cfg: cfg.withDefaults()}
}

// Run refreshes the keys every min(Rotation/4, TokenTTL/2, 1 minute)
// until ctx ends; failures are logged and retried at the next tick.
// Errors: none but ctx's end, which returns nil.
func (r *KeyRing) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.refreshEvery())
	defer t.Stop()
	for {
		if err := r.Refresh(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("identity signing keys: refresh failed; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Refresh reads the keys and brings them to the schedule: a signing key
// when there is none, the next key when none is published yet, retired
// keys past their last token's expiry deleted. Replicas racing to create
// a key create one (store.SigningKeys refuses a second of a generation);
// the loser reads the winner's. Errors: the store's, wrapped.
func (r *KeyRing) Refresh(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		recs, err := r.st.ListSigningKeys(ctx)
		if err != nil {
			return fmt.Errorf("list signing keys: %w", err)
		}
		now := r.cfg.Now()
		add, drop := r.plan(recs, now)
		for _, id := range drop {
			if err := r.st.DeleteSigningKey(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("delete retired signing key %s: %w", id, err)
			}
			r.cfg.Logger.Info("identity signing key retired and deleted", "kid", id)
		}
		if add == nil {
			return r.load(recs, drop)
		}
		err = r.st.CreateSigningKey(ctx, add)
		switch {
		case err == nil:
			r.cfg.Logger.Info("identity signing key created", "kid", add.ID, "generation", add.Generation, "notBefore", add.NotBefore)
		case errors.Is(err, store.ErrAlreadyExists) && attempt < 3:
			// Another replica created this generation: read it.
		default:
			return fmt.Errorf("create signing key: %w", err)
		}
	}
}

// plan returns the key to create next (nil when none is due) and the ids
// of keys to delete, given the stored keys recs (by generation) at now.
func (r *KeyRing) plan(recs []*store.SigningKey, now time.Time) (add *store.SigningKey, drop []string) {
	if len(recs) == 0 {
		return r.newKey(1, now, now), nil
	}
	active := activeIndex(recs, now)
	for i := 0; i < active; i++ {
		// recs[i] stopped signing when recs[i+1] started.
		if now.After(recs[i+1].NotBefore.Add(r.cfg.TokenTTL + r.cfg.Leeway)) {
			drop = append(drop, recs[i].ID)
		}
	}
	if last := recs[len(recs)-1]; active == len(recs)-1 {
		// The signing key is the newest: publish its successor, a full
		// rotation ahead, or half of one when the schedule fell behind.
		nb := last.NotBefore.Add(r.cfg.Rotation)
		if floor := now.Add(r.cfg.Rotation / 2); nb.Before(floor) {
			nb = floor
		}
		add = r.newKey(last.Generation+1, nb, now)
	}
	return add, drop
}

// activeIndex is the index of the key that signs at now: the newest
// whose NotBefore is not after now, or the oldest when all are in the
// future (this replica's clock behind the one that created them).
func activeIndex(recs []*store.SigningKey, now time.Time) int {
	active := 0
	for i, k := range recs {
		if !k.NotBefore.After(now) {
			active = i
		}
	}
	return active
}

// newKey returns a fresh key record; nil if the system's randomness
// fails, which crypto/rand documents as never happening.
func (r *KeyRing) newKey(gen int64, notBefore, now time.Time) *store.SigningKey {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		panic(err)
	}
	id := make([]byte, 12)
	_, _ = rand.Read(id)
	return &store.SigningKey{ID: base64.RawURLEncoding.EncodeToString(id), Generation: gen, Algorithm: string(Algorithm),
		PrivateKey: der, NotBefore: notBefore.UTC(), CreateTime: now.UTC()}
}

// load replaces the ring's keys with recs minus the deleted ones.
func (r *KeyRing) load(recs []*store.SigningKey, deleted []string) error {
	keys := make([]key, 0, len(recs))
	for _, rec := range recs {
		if slices.Contains(deleted, rec.ID) {
			continue
		}
		if rec.Algorithm != string(Algorithm) {
			return fmt.Errorf("signing key %s: algorithm %q, want %s", rec.ID, rec.Algorithm, Algorithm)
		}
		p, err := x509.ParsePKCS8PrivateKey(rec.PrivateKey)
		if err != nil {
			return fmt.Errorf("signing key %s: %w", rec.ID, err)
		}
		priv, ok := p.(*ecdsa.PrivateKey)
		if !ok {
			return fmt.Errorf("signing key %s: a %T, want an ECDSA key", rec.ID, p)
		}
		keys = append(keys, key{rec: rec, priv: priv})
	}
	r.mu.Lock()
	r.keys, r.loaded = keys, true
	r.mu.Unlock()
	return nil
}

// current returns the loaded keys, refreshing first if none are.
func (r *KeyRing) current(ctx context.Context) ([]key, error) {
	r.mu.Lock()
	keys, loaded := r.keys, r.loaded
	r.mu.Unlock()
	if loaded && len(keys) > 0 {
		return keys, nil
	}
	if err := r.Refresh(ctx); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.keys) == 0 {
		return nil, errors.New("no signing key")
	}
	return r.keys, nil
}

// Signer returns a JWS signer with the key that signs now (its kid in
// the header, typ JWT). Errors: the store's when no key is loaded yet.
func (r *KeyRing) Signer(ctx context.Context) (jose.Signer, string, error) {
	keys, err := r.current(ctx)
	if err != nil {
		return nil, "", err
	}
	recs := make([]*store.SigningKey, len(keys))
	for i, k := range keys {
		recs[i] = k.rec
	}
	k := keys[activeIndex(recs, r.cfg.Now())]
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: Algorithm, Key: jose.JSONWebKey{Key: k.priv, KeyID: k.rec.ID}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return nil, "", fmt.Errorf("signer for key %s: %w", k.rec.ID, err)
	}
	return s, k.rec.ID, nil
}

// JWKS returns the public keys to publish: every loaded key that has not
// yet expired — the next one, the signing one and retired ones whose
// tokens may still be valid — ordered by generation.
func (r *KeyRing) JWKS(ctx context.Context) (jose.JSONWebKeySet, error) {
	keys, err := r.current(ctx)
	if err != nil {
		return jose.JSONWebKeySet{}, err
	}
	now := r.cfg.Now()
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{}}
	for i, k := range keys {
		if i+1 < len(keys) && now.After(keys[i+1].rec.NotBefore.Add(r.cfg.TokenTTL+r.cfg.Leeway)) {
			continue // expired, not yet deleted
		}
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: &k.priv.PublicKey, KeyID: k.rec.ID, Algorithm: string(Algorithm), Use: "sig"})
	}
	return set, nil
}
