package postgres

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/codec"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
)

// encode is v's record JSON.
func encode(what string, v any) ([]byte, error) {
	b, err := codec.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", what, err)
	}
	return b, nil
}

// decode decodes the record JSON b of what.
func decode[T any](what string, b []byte) (*T, error) {
	var out T
	if err := codec.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("decode %s: %w", what, err)
	}
	return &out, nil
}

// notFound turns pgx.ErrNoRows into store.ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	return err
}

// CreateAtespace implements store.Store.
func (s *Store) CreateAtespace(ctx context.Context, a *store.Atespace) error {
	rec, err := encode("atespace "+a.Name, a)
	if err != nil {
		return err
	}
	return s.do(ctx, func(q querier) error {
		_, err := q.Exec(ctx, `INSERT INTO atespaces (name, record) VALUES ($1, $2)`, a.Name, rec)
		if code, _ := pgCode(err); code == uniqueViolation {
			return fmt.Errorf("atespace %s: %w", a.Name, store.ErrAlreadyExists)
		}
		return err
	})
}

// GetAtespace implements store.Store.
func (s *Store) GetAtespace(ctx context.Context, name string) (out *store.Atespace, err error) {
	err = s.do(ctx, func(q querier) error {
		var rec []byte
		if err := q.QueryRow(ctx, `SELECT record FROM atespaces WHERE name = $1`, name).Scan(&rec); err != nil {
			return fmt.Errorf("atespace %s: %w", name, notFound(err))
		}
		out, err = decode[store.Atespace]("atespace "+name, rec)
		return err
	})
	return out, err
}

// ListAtespaces implements store.Store.
func (s *Store) ListAtespaces(ctx context.Context) (out []*store.Atespace, err error) {
	err = s.do(ctx, func(q querier) error {
		out, err = list[store.Atespace](ctx, q, "atespaces", `SELECT record FROM atespaces ORDER BY name`)
		return err
	})
	return out, err
}

// list decodes the single record column of every row of query.
func list[T any](ctx context.Context, q querier, what, query string, args ...any) ([]*T, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	var out []*T
	for rows.Next() {
		var rec []byte
		if err := rows.Scan(&rec); err != nil {
			rows.Close()
			return nil, err
		}
		v, err := decode[T](what, rec)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// DeleteAtespace implements store.Store. The foreign keys of templates
// (and, through them, actors) refuse the delete while any remain.
func (s *Store) DeleteAtespace(ctx context.Context, name string) error {
	return s.do(ctx, func(q querier) error {
		tag, err := q.Exec(ctx, `DELETE FROM atespaces WHERE name = $1`, name)
		if code, _ := pgCode(err); code == foreignKeyViolation {
			return fmt.Errorf("atespace %s holds actors, templates or tags: %w", name, store.ErrNotEmpty)
		}
		if err == nil && tag.RowsAffected() == 0 {
			return fmt.Errorf("atespace %s: %w", name, store.ErrNotFound)
		}
		return err
	})
}

// CreateTemplate implements store.Store.
func (s *Store) CreateTemplate(ctx context.Context, t *store.Template) error {
	key := t.Atespace + "/" + t.Name
	spec, err := proto.Marshal(t.Spec)
	if err != nil {
		return fmt.Errorf("encode template %s spec: %w", key, err)
	}
	rec, err := encode("template "+key, t)
	if err != nil {
		return err
	}
	return s.do(ctx, func(q querier) error {
		_, err := q.Exec(ctx, `INSERT INTO templates (key, atespace, name, uid, version, spec, record)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, key, t.Atespace, t.Name, t.UID, t.Version, spec, rec)
		switch code, _ := pgCode(err); code {
		case foreignKeyViolation:
			return fmt.Errorf("atespace %s: %w", t.Atespace, store.ErrNotFound)
		case uniqueViolation:
			return fmt.Errorf("template %s: %w", key, store.ErrAlreadyExists)
		}
		return err
	})
}

// scanTemplate decodes a template from its spec and record columns.
func scanTemplate(key string, spec, rec []byte) (*store.Template, error) {
	t, err := decode[store.Template]("template "+key, rec)
	if err != nil {
		return nil, err
	}
	t.Spec = &atev1.ActorTemplateSpec{}
	if err := proto.Unmarshal(spec, t.Spec); err != nil {
		return nil, fmt.Errorf("decode template %s spec: %w", key, err)
	}
	return t, nil
}

// GetTemplate implements store.Store.
func (s *Store) GetTemplate(ctx context.Context, atespace, name string) (out *store.Template, err error) {
	key := atespace + "/" + name
	err = s.do(ctx, func(q querier) error {
		var spec, rec []byte
		if err := q.QueryRow(ctx, `SELECT spec, record FROM templates WHERE key = $1`, key).Scan(&spec, &rec); err != nil {
			return fmt.Errorf("template %s: %w", key, notFound(err))
		}
		out, err = scanTemplate(key, spec, rec)
		return err
	})
	return out, err
}

// ListTemplates implements store.Store.
func (s *Store) ListTemplates(ctx context.Context, atespace string) (out []*store.Template, err error) {
	err = s.do(ctx, func(q querier) error {
		out = nil
		rows, err := q.Query(ctx, `SELECT key, spec, record FROM templates WHERE $1 = '' OR atespace = $1 ORDER BY key`, atespace)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var key string
			var spec, rec []byte
			if err := rows.Scan(&key, &spec, &rec); err != nil {
				return err
			}
			t, err := scanTemplate(key, spec, rec)
			if err != nil {
				return err
			}
			out = append(out, t)
		}
		return rows.Err()
	})
	return out, err
}

// UpdateTemplateStatus implements store.Store.
func (s *Store) UpdateTemplateStatus(ctx context.Context, t *store.Template) (out *store.Template, err error) {
	key := t.Atespace + "/" + t.Name
	err = s.tx(ctx, func(tx pgx.Tx) error {
		var spec, rec []byte
		// NO KEY UPDATE: the key stays, so actors' foreign-key checks
		// (KEY SHARE) need not wait for this write.
		err := tx.QueryRow(ctx, `SELECT spec, record FROM templates WHERE key = $1 FOR NO KEY UPDATE`, key).Scan(&spec, &rec)
		if err != nil {
			return fmt.Errorf("template %s: %w", key, notFound(err))
		}
		cur, err := scanTemplate(key, spec, rec)
		if err != nil {
			return err
		}
		if cur.UID != t.UID || cur.Version != t.Version {
			return fmt.Errorf("template %s: %w", key, store.ErrConflict)
		}
		cur.SetStatus(t)
		cur.Version++
		if rec, err = encode("template "+key, cur); err != nil {
			return err
		}
		out = cur
		_, err = tx.Exec(ctx, `UPDATE templates SET version = $2, record = $3 WHERE key = $1`, key, cur.Version, rec)
		return err
	})
	return out, err
}

// DeleteTemplate implements store.Store. The actors' foreign key refuses
// the delete while any uses the template.
func (s *Store) DeleteTemplate(ctx context.Context, atespace, name string) error {
	key := atespace + "/" + name
	return s.do(ctx, func(q querier) error {
		tag, err := q.Exec(ctx, `DELETE FROM templates WHERE key = $1`, key)
		if code, constraint := pgCode(err); code == foreignKeyViolation {
			if constraint == "tags_template_fkey" {
				return fmt.Errorf("template %s is used by tags: %w", key, store.ErrNotEmpty)
			}
			return fmt.Errorf("template %s is used by actors: %w", key, store.ErrNotEmpty)
		}
		if err == nil && tag.RowsAffected() == 0 {
			return fmt.Errorf("template %s: %w", key, store.ErrNotFound)
		}
		return err
	})
}

// CreateActor implements store.Store.
func (s *Store) CreateActor(ctx context.Context, a *store.Actor) error {
	key := a.Key().String()
	rec, err := encode("actor "+key, a)
	if err != nil {
		return err
	}
	return s.do(ctx, func(q querier) error {
		_, err := q.Exec(ctx, `INSERT INTO actors (key, atespace, name, uid, template, version, state, worker, record)
			VALUES ($1, $2, $3, $4, $5, $6, $7, NULLIF($8, ''), $9)`,
			key, a.Atespace, a.Name, a.UID, a.Template, a.Version, string(a.State), a.Worker, rec)
		switch code, _ := pgCode(err); code {
		case uniqueViolation:
			return fmt.Errorf("actor %s: %w", key, store.ErrAlreadyExists)
		case foreignKeyViolation:
			// The key is (atespace, template): say which is missing.
			var ok bool
			if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM atespaces WHERE name = $1)`, a.Atespace).Scan(&ok); err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("atespace %s: %w", a.Atespace, store.ErrNotFound)
			}
			return fmt.Errorf("template %s/%s: %w", a.Atespace, a.Template, store.ErrNotFound)
		}
		return err
	})
}

// GetActor implements store.Store.
func (s *Store) GetActor(ctx context.Context, key names.ActorKey) (out *store.Actor, err error) {
	err = s.do(ctx, func(q querier) error {
		var rec []byte
		if err := q.QueryRow(ctx, `SELECT record FROM actors WHERE key = $1`, key.String()).Scan(&rec); err != nil {
			return fmt.Errorf("actor %s: %w", key, notFound(err))
		}
		out, err = decode[store.Actor]("actor "+key.String(), rec)
		return err
	})
	return out, err
}

// ListActors implements store.Store. As bolt's, the page token is the
// last key returned, base64-encoded, and must lie in atespace: a page is
// one index range scan of the primary key, whatever the total.
func (s *Store) ListActors(ctx context.Context, atespace string, pageSize int, pageToken string) (out []*store.Actor, next string, err error) {
	prefix := ""
	if atespace != "" {
		prefix = atespace + "/"
	}
	after, err := base64.RawURLEncoding.DecodeString(pageToken)
	if err != nil || (pageToken != "" && !strings.HasPrefix(string(after), prefix)) {
		return nil, "", fmt.Errorf("invalid page token %q", pageToken)
	}
	if pageSize < 1 {
		return nil, "", fmt.Errorf("page size %d: must be at least 1", pageSize)
	}
	// Keys of atespace lie in [prefix, upper): '0' follows '/' byte-wise.
	upper := ""
	if atespace != "" {
		upper = atespace + "0"
	}
	start := max(string(after), prefix)
	err = s.do(ctx, func(q querier) error {
		out, next = nil, ""
		var err error
		out, err = list[store.Actor](ctx, q, "actor",
			`SELECT record FROM actors WHERE key >= $1 AND key <> $2 AND ($3 = '' OR key < $3) ORDER BY key LIMIT $4`,
			start, string(after), upper, pageSize+1)
		if err != nil {
			return err
		}
		if len(out) > pageSize {
			out = out[:pageSize]
			next = base64.RawURLEncoding.EncodeToString([]byte(out[pageSize-1].Key().String()))
		}
		return nil
	})
	return out, next, err
}
