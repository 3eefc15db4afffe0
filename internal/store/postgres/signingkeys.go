package postgres

import (
	"context"
	"fmt"

	"substrate.dev/ate/internal/store"
)

var _ store.SigningKeys = (*Store)(nil)

// CreateSigningKey implements store.SigningKeys: the primary key
// (generation) and the unique id refuse a duplicate in the inserting
// statement.
func (s *Store) CreateSigningKey(ctx context.Context, k *store.SigningKey) error {
	rec, err := encode("signing key "+k.ID, k)
	if err != nil {
		return err
	}
	return s.do(ctx, func(q querier) error {
		_, err := q.Exec(ctx, `INSERT INTO signing_keys (generation, id, record) VALUES ($1, $2, $3)`, k.Generation, k.ID, rec)
		if code, _ := pgCode(err); code == uniqueViolation {
			return fmt.Errorf("signing key %s (generation %d): %w", k.ID, k.Generation, store.ErrAlreadyExists)
		}
		return err
	})
}

// ListSigningKeys implements store.SigningKeys.
func (s *Store) ListSigningKeys(ctx context.Context) (out []*store.SigningKey, err error) {
	err = s.do(ctx, func(q querier) error {
		out, err = list[store.SigningKey](ctx, q, "signing keys", `SELECT record FROM signing_keys ORDER BY generation`)
		return err
	})
	return out, err
}

// DeleteSigningKey implements store.SigningKeys.
func (s *Store) DeleteSigningKey(ctx context.Context, id string) error {
	return s.do(ctx, func(q querier) error {
		tag, err := q.Exec(ctx, `DELETE FROM signing_keys WHERE id = $1`, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("signing key %s: %w", id, store.ErrNotFound)
		}
		return nil
	})
}
