package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"substrate.dev/ate/internal/store"
)

func newSigningKey(id string, gen int64) *store.SigningKey {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	return &store.SigningKey{ID: id, Generation: gen, Algorithm: "ES256", PrivateKey: []byte("der-" + id),
		NotBefore: at.Add(time.Duration(gen) * time.Hour), CreateTime: at}
}

func sameSigningKey(a, b *store.SigningKey) bool {
	return a.ID == b.ID && a.Generation == b.Generation && a.Algorithm == b.Algorithm &&
		bytes.Equal(a.PrivateKey, b.PrivateKey) && a.NotBefore.Equal(b.NotBefore) && a.CreateTime.Equal(b.CreateTime)
}

// testSigningKeys: create refuses a duplicate id or generation, list is
// in generation order, delete by id.
func testSigningKeys(t *testing.T, s store.Store) {
	ctx := context.Background()
	if got, err := s.ListSigningKeys(ctx); err != nil || len(got) != 0 {
		t.Fatalf("ListSigningKeys on an empty store = %v, %v; want none", got, err)
	}
	must(t, s.CreateSigningKey(ctx, newSigningKey("k2", 2)))
	must(t, s.CreateSigningKey(ctx, newSigningKey("k1", 1)))
	must(t, s.CreateSigningKey(ctx, newSigningKey("k10", 10)))
	wantErr(t, s.CreateSigningKey(ctx, newSigningKey("k3", 2)), store.ErrAlreadyExists)
	wantErr(t, s.CreateSigningKey(ctx, newSigningKey("k1", 3)), store.ErrAlreadyExists)

	got, err := s.ListSigningKeys(ctx)
	must(t, err)
	want := []*store.SigningKey{newSigningKey("k1", 1), newSigningKey("k2", 2), newSigningKey("k10", 10)}
	if len(got) != len(want) {
		t.Fatalf("ListSigningKeys = %d keys, want %d", len(got), len(want))
	}
	for i := range want {
		if !sameSigningKey(got[i], want[i]) {
			t.Errorf("ListSigningKeys[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}

	must(t, s.DeleteSigningKey(ctx, "k2"))
	wantErr(t, s.DeleteSigningKey(ctx, "k2"), store.ErrNotFound)
	got, err = s.ListSigningKeys(ctx)
	must(t, err)
	if len(got) != 2 || got[0].ID != "k1" || got[1].ID != "k10" {
		t.Errorf("after delete: %v, want k1, k10", got)
	}
}

// testSigningKeysConcurrent: replicas racing to add the same generation
// create exactly one key.
func testSigningKeysConcurrent(t *testing.T, s store.Store) {
	ctx := context.Background()
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = s.CreateSigningKey(ctx, newSigningKey(fmt.Sprintf("racer-%d", i), 1)) })
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrAlreadyExists):
			t.Errorf("CreateSigningKey: %v, want nil or ErrAlreadyExists", err)
		}
	}
	got, err := s.ListSigningKeys(ctx)
	must(t, err)
	if won != 1 || len(got) != 1 {
		t.Errorf("%d creates succeeded and %d keys stored, want 1 and 1", won, len(got))
	}
}
