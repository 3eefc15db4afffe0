package bolt

import (
	"context"
	"fmt"

	"go.etcd.io/bbolt"

	"substrate.dev/ate/internal/store"
)

// bSigningKeys holds signing keys by signingKeyKey(generation), so a
// cursor walks them in generation order.
var bSigningKeys = []byte("signingKeys")

var _ store.SigningKeys = (*Store)(nil)

// signingKeyKey is a key's key in bSigningKeys: its generation, zero
// padded so byte order is numeric order.
func signingKeyKey(generation int64) []byte { return fmt.Appendf(nil, "%020d", generation) }

// CreateSigningKey implements store.SigningKeys. Keys are few (two or
// three), so the id check scans them.
func (s *Store) CreateSigningKey(_ context.Context, k *store.SigningKey) error {
	return s.update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bSigningKeys)
		key := signingKeyKey(k.Generation)
		if b.Get(key) != nil {
			return fmt.Errorf("signing key generation %d: %w", k.Generation, store.ErrAlreadyExists)
		}
		err := b.ForEach(func(bk, v []byte) error {
			cur, err := decode[store.SigningKey](bk, v)
			if err != nil {
				return err
			}
			if cur.ID == k.ID {
				return fmt.Errorf("signing key %s: %w", k.ID, store.ErrAlreadyExists)
			}
			return nil
		})
		if err != nil {
			return err
		}
		return put(b, key, k)
	})
}

// ListSigningKeys implements store.SigningKeys.
func (s *Store) ListSigningKeys(_ context.Context) (out []*store.SigningKey, err error) {
	err = s.db.View(func(tx *bbolt.Tx) error {
		out = nil
		return tx.Bucket(bSigningKeys).ForEach(func(k, v []byte) error {
			key, err := decode[store.SigningKey](k, v)
			if err != nil {
				return err
			}
			out = append(out, key)
			return nil
		})
	})
	return out, err
}

// DeleteSigningKey implements store.SigningKeys.
func (s *Store) DeleteSigningKey(_ context.Context, id string) error {
	return s.update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bSigningKeys)
		var found []byte
		err := b.ForEach(func(bk, v []byte) error {
			cur, err := decode[store.SigningKey](bk, v)
			if err != nil {
				return err
			}
			if cur.ID == id {
				found = append([]byte(nil), bk...)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if found == nil {
			return fmt.Errorf("signing key %s: %w", id, store.ErrNotFound)
		}
		return b.Delete(found)
	})
}
