package postgres

import (
	"context"
	"fmt"

	"substrate.dev/ate/internal/store"
)

var _ store.Tags = (*Store)(nil)

// CreateTag implements store.Tags. The foreign key on (atespace,
// template) checks both exist in the inserting statement.
func (s *Store) CreateTag(ctx context.Context, t *store.Tag) error {
	key := t.Atespace + "/" + t.Name
	rec, err := encode("tag "+key, t)
	if err != nil {
		return err
	}
	return s.do(ctx, func(q querier) error {
		_, err := q.Exec(ctx, `INSERT INTO tags (key, atespace, name, uid, template, record)
			VALUES ($1, $2, $3, $4, $5, $6)`, key, t.Atespace, t.Name, t.UID, t.Template, rec)
		switch code, _ := pgCode(err); code {
		case uniqueViolation:
			return fmt.Errorf("tag %s: %w", key, store.ErrAlreadyExists)
		case foreignKeyViolation:
			var ok bool
			if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM atespaces WHERE name = $1)`, t.Atespace).Scan(&ok); err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("atespace %s: %w", t.Atespace, store.ErrNotFound)
			}
			return fmt.Errorf("template %s/%s: %w", t.Atespace, t.Template, store.ErrNotFound)
		}
		return err
	})
}

// GetTag implements store.Tags.
func (s *Store) GetTag(ctx context.Context, atespace, name string) (out *store.Tag, err error) {
	key := atespace + "/" + name
	err = s.do(ctx, func(q querier) error {
		var rec []byte
		if err := q.QueryRow(ctx, `SELECT record FROM tags WHERE key = $1`, key).Scan(&rec); err != nil {
			return fmt.Errorf("tag %s: %w", key, notFound(err))
		}
		out, err = decode[store.Tag]("tag "+key, rec)
		return err
	})
	return out, err
}

// ListTags implements store.Tags.
func (s *Store) ListTags(ctx context.Context, atespace string) (out []*store.Tag, err error) {
	err = s.do(ctx, func(q querier) error {
		if atespace != "" {
			out, err = list[store.Tag](ctx, q, "tags", `SELECT record FROM tags WHERE atespace = $1 ORDER BY key`, atespace)
		} else {
			out, err = list[store.Tag](ctx, q, "tags", `SELECT record FROM tags ORDER BY key`)
		}
		return err
	})
	return out, err
}

// DeleteTag implements store.Tags.
func (s *Store) DeleteTag(ctx context.Context, atespace, name, uid string) error {
	key := atespace + "/" + name
	return s.do(ctx, func(q querier) error {
		var deleted bool
		err := q.QueryRow(ctx, `WITH d AS (DELETE FROM tags WHERE key = $1 AND uid = $2 RETURNING 1)
			SELECT EXISTS (SELECT 1 FROM d)`, key, uid).Scan(&deleted)
		if err != nil || deleted {
			return err
		}
		var exists bool
		if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tags WHERE key = $1)`, key).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return fmt.Errorf("tag %s is another incarnation (not uid %s): %w", key, uid, store.ErrConflict)
		}
		return fmt.Errorf("tag %s: %w", key, store.ErrNotFound)
	})
}
