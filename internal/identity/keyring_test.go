package identity

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/store/bolt"
	"substrate.dev/ate/internal/store/postgres"
)

// clock is a test clock both replicas read.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// backends are the record stores the ring is tested over: each returns
// two handles on one store, as two API server replicas have (bolt: the
// same handle, its file being one process's).
var backends = []struct {
	name string
	open func(t *testing.T) (store.Store, store.Store)
}{
	{"bolt", func(t *testing.T) (store.Store, store.Store) {
		s, err := bolt.Open(filepath.Join(t.TempDir(), "ate.db"), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s, s
	}},
	{"postgres", func(t *testing.T) (store.Store, store.Store) {
		url := pg.NewDatabase(t)
		var out [2]store.Store
		for i := range out {
			s, err := postgres.Open(context.Background(), url, postgres.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			out[i] = s
		}
		return out[0], out[1]
	}},
}

func kids(set jose.JSONWebKeySet) []string {
	var out []string
	for _, k := range set.Keys {
		out = append(out, k.KeyID)
	}
	return out
}

func storedKids(t *testing.T, s store.Store) []string {
	t.Helper()
	recs, err := s.ListSigningKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, r.ID)
	}
	return out
}

// refreshBoth refreshes both replicas' rings at once, as their tickers
// may.
func refreshBoth(t *testing.T, a, b *KeyRing) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, r := range []*KeyRing{a, b} {
		wg.Go(func() { errs[i] = r.Refresh(context.Background()) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// sign signs a token with r's current key and returns it with its kid.
func sign(t *testing.T, r *KeyRing, now time.Time) (string, string) {
	t.Helper()
	s, kid, err := r.Signer(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(jwt.Claims{Subject: "actor:default/a", Expiry: jwt.NewNumericDate(now.Add(time.Minute))}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok, kid
}

// verifies reports whether tok's signature checks against set.
func verifies(t *testing.T, tok string, set jose.JSONWebKeySet) bool {
	t.Helper()
	parsed, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{Algorithm})
	if err != nil {
		t.Fatal(err)
	}
	var c jwt.Claims
	return parsed.Claims(set, &c) == nil
}

// TestKeyRingRotation: two replicas over one store create one signing
// key and one next key between them; the next key is published before
// it signs; after the switch the old key stays published (its tokens
// verify) for TokenTTL + Leeway, then is deleted by either replica.
func TestKeyRingRotation(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			clk := &clock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
			cfg := Config{TokenTTL: 10 * time.Minute, Rotation: 24 * time.Hour, Leeway: time.Minute, Now: clk.Now}
			s1, s2 := be.open(t)
			a, b := NewKeyRing(s1, cfg), NewKeyRing(s2, cfg)

			refreshBoth(t, a, b)
			stored := storedKids(t, s1)
			if len(stored) != 2 {
				t.Fatalf("after the first refresh of two replicas: %d keys stored, want 2 (signing + next)", len(stored))
			}
			k1, k2 := stored[0], stored[1]
			for _, r := range []*KeyRing{a, b} {
				set, err := r.JWKS(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if got := kids(set); !slices.Equal(got, []string{k1, k2}) {
					t.Errorf("JWKS = %v, want the signing and the next key %v", got, []string{k1, k2})
				}
			}
			old, kid := sign(t, a, clk.Now())
			if _, kidB, _ := b.Signer(ctx); kid != k1 || kidB != k1 {
				t.Fatalf("signing kids %s, %s, want %s on both", kid, kidB, k1)
			}

			// The rotation: k2 signs on both replicas, a third key is
			// published (once), k1 stays for tokens it signed.
			clk.Add(24 * time.Hour)
			if _, kid, _ := a.Signer(ctx); kid != k2 {
				t.Errorf("after a rotation period replica A signs with %s, want %s (before its refresh)", kid, k2)
			}
			refreshBoth(t, a, b)
			stored = storedKids(t, s1)
			if len(stored) != 3 || stored[0] != k1 || stored[1] != k2 {
				t.Fatalf("after the rotation: stored %v, want %s, %s and one new key", stored, k1, k2)
			}
			set, err := b.JWKS(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := kids(set); !slices.Equal(got, stored) {
				t.Errorf("JWKS during the overlap = %v, want %v", got, stored)
			}
			if !verifies(t, old, set) {
				t.Error("a token signed by the retired key does not verify during the overlap")
			}
			if _, kid := sign(t, b, clk.Now()); kid != k2 {
				t.Errorf("replica B signs with %s, want %s", kid, k2)
			}

			// Just before the old key's last token expired: still there.
			clk.Add(11*time.Minute - time.Second)
			refreshBoth(t, a, b)
			if got := storedKids(t, s1); len(got) != 3 {
				t.Errorf("before TokenTTL+Leeway after the switch: stored %v, want all 3", got)
			}
			// After: deleted and unpublished.
			clk.Add(2 * time.Second)
			refreshBoth(t, a, b)
			if got := storedKids(t, s2); !slices.Equal(got, stored[1:]) {
				t.Errorf("after TokenTTL+Leeway: stored %v, want %v", got, stored[1:])
			}
			set, err = a.JWKS(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := kids(set); !slices.Equal(got, stored[1:]) {
				t.Errorf("JWKS after retirement = %v, want %v", got, stored[1:])
			}
			if verifies(t, old, set) {
				t.Error("a token of the deleted key still verifies")
			}
		})
	}
}

// TestKeyRingBehindSchedule: after downtime longer than a rotation the
// newest key signs and its successor is published half a period ahead,
// not in the past; the keys between are retired.
func TestKeyRingBehindSchedule(t *testing.T) {
	ctx := context.Background()
	clk := &clock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	cfg := Config{TokenTTL: time.Minute, Rotation: time.Hour, Leeway: time.Second, Now: clk.Now}
	s, _ := backends[0].open(t)
	r := NewKeyRing(s, cfg)
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	k2 := storedKids(t, s)[1]
	clk.Add(5 * time.Hour)
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	recs, err := s.ListSigningKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].ID != k2 {
		t.Fatalf("stored %v, want %s and a new one", storedKids(t, s), k2)
	}
	if want := clk.Now().Add(30 * time.Minute); !recs[1].NotBefore.Equal(want) {
		t.Errorf("next key's NotBefore = %v, want %v (half a rotation ahead)", recs[1].NotBefore, want)
	}
	if _, kid, _ := r.Signer(ctx); kid != k2 {
		t.Errorf("signs with %s, want %s", kid, k2)
	}
}
