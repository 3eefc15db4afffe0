package postgres

import (
	"context"
	"fmt"

	"substrate.dev/ate/internal/store"
)

var _ store.IngressTokens = (*Store)(nil)

// CreateIngressToken implements store.IngressTokens. The foreign key on
// atespace checks it exists in the inserting statement.
func (s *Store) CreateIngressToken(ctx context.Context, t *store.IngressToken) error {
	key := t.Atespace + "/" + t.Name
	rec, err := encode("ingress token "+key, t)
	if err != nil {
		return err
	}
	return s.do(ctx, func(q querier) error {
		_, err := q.Exec(ctx, `INSERT INTO ingress_tokens (key, atespace, name, hash, record)
			VALUES ($1, $2, $3, $4, $5)`, key, t.Atespace, t.Name, t.Hash, rec)
		switch code, _ := pgCode(err); code {
		case uniqueViolation:
			return fmt.Errorf("ingress token %s: %w", key, store.ErrAlreadyExists)
		case foreignKeyViolation:
			return fmt.Errorf("atespace %s: %w", t.Atespace, store.ErrNotFound)
		}
		return err
	})
}

// ListIngressTokens implements store.IngressTokens.
func (s *Store) ListIngressTokens(ctx context.Context, atespace string) (out []*store.IngressToken, err error) {
	err = s.do(ctx, func(q querier) error {
		if atespace != "" {
			out, err = list[store.IngressToken](ctx, q, "ingress tokens",
				`SELECT record FROM ingress_tokens WHERE atespace = $1 ORDER BY key`, atespace)
		} else {
			out, err = list[store.IngressToken](ctx, q, "ingress tokens", `SELECT record FROM ingress_tokens ORDER BY key`)
		}
		return err
	})
	return out, err
}

// FindIngressToken implements store.IngressTokens.
func (s *Store) FindIngressToken(ctx context.Context, atespace, hash string) (out *store.IngressToken, err error) {
	err = s.do(ctx, func(q querier) error {
		var rec []byte
		err := q.QueryRow(ctx, `SELECT record FROM ingress_tokens WHERE atespace = $1 AND hash = $2`, atespace, hash).Scan(&rec)
		if err != nil {
			return fmt.Errorf("ingress token of atespace %s with that hash: %w", atespace, notFound(err))
		}
		out, err = decode[store.IngressToken]("ingress token of atespace "+atespace, rec)
		return err
	})
	return out, err
}

// DeleteIngressToken implements store.IngressTokens.
func (s *Store) DeleteIngressToken(ctx context.Context, atespace, name string) error {
	key := atespace + "/" + name
	return s.do(ctx, func(q querier) error {
		tag, err := q.Exec(ctx, `DELETE FROM ingress_tokens WHERE key = $1`, key)
		if err == nil && tag.RowsAffected() == 0 {
			return fmt.Errorf("ingress token %s: %w", key, store.ErrNotFound)
		}
		return err
	})
}
