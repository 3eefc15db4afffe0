package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"substrate.dev/ate/internal/store"
)

// CreateAlarm implements store.Store. The actor's row is locked FOR
// UPDATE, so concurrent creates for one actor count each other's alarms
// and the actor cannot be deleted before the insert commits.
func (s *Store) CreateAlarm(ctx context.Context, a *store.Alarm, maxPending int) error {
	key := a.Key().String()
	rec, err := encode("alarm "+a.ID, a)
	if err != nil {
		return err
	}
	return s.tx(ctx, func(tx pgx.Tx) error {
		var uid string
		err := tx.QueryRow(ctx, `SELECT uid FROM actors WHERE key = $1 FOR UPDATE`, key).Scan(&uid)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if err != nil || uid != a.ActorUID {
			return fmt.Errorf("actor %s (uid %s): %w", key, a.ActorUID, store.ErrNotFound)
		}
		var pending int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM alarms WHERE actor = $1 AND state = $2`, key, string(store.AlarmPending)).Scan(&pending); err != nil {
			return err
		}
		if pending >= maxPending {
			return fmt.Errorf("actor %s has %d pending alarms, at most %d are allowed: %w", key, pending, maxPending, store.ErrTooMany)
		}
		_, err = tx.Exec(ctx, `INSERT INTO alarms (id, actor, atespace, state, version, next_attempt, record)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, a.ID, key, a.Atespace, string(a.State), a.Version, a.NextAttempt, rec)
		if code, _ := pgCode(err); code == uniqueViolation {
			return fmt.Errorf("alarm %s: %w", a.ID, store.ErrAlreadyExists)
		}
		return err
	})
}

// GetAlarm implements store.Store.
func (s *Store) GetAlarm(ctx context.Context, id string) (out *store.Alarm, err error) {
	err = s.do(ctx, func(q querier) error {
		var rec []byte
		if err := q.QueryRow(ctx, `SELECT record FROM alarms WHERE id = $1`, id).Scan(&rec); err != nil {
			return fmt.Errorf("alarm %s: %w", id, notFound(err))
		}
		out, err = decode[store.Alarm]("alarm "+id, rec)
		return err
	})
	return out, err
}

// ListAlarms implements store.Store.
func (s *Store) ListAlarms(ctx context.Context, atespace, actor string) (out []*store.Alarm, err error) {
	err = s.do(ctx, func(q querier) error {
		switch {
		case actor != "":
			out, err = list[store.Alarm](ctx, q, "alarms", `SELECT record FROM alarms WHERE actor = $1 ORDER BY next_attempt, id`, atespace+"/"+actor)
		case atespace != "":
			out, err = list[store.Alarm](ctx, q, "alarms", `SELECT record FROM alarms WHERE atespace = $1 ORDER BY next_attempt, id`, atespace)
		default:
			out, err = list[store.Alarm](ctx, q, "alarms", `SELECT record FROM alarms ORDER BY next_attempt, id`)
		}
		return err
	})
	return out, err
}

// UpdateAlarm implements store.Store.
func (s *Store) UpdateAlarm(ctx context.Context, a *store.Alarm) (out *store.Alarm, err error) {
	n := *a
	n.Version++
	rec, err := encode("alarm "+a.ID, &n)
	if err != nil {
		return nil, err
	}
	err = s.do(ctx, func(q querier) error {
		tag, err := q.Exec(ctx, `UPDATE alarms SET state = $3, version = $4, next_attempt = $5, record = $6
			WHERE id = $1 AND version = $2 AND actor = $7`,
			a.ID, a.Version, string(n.State), n.Version, n.NextAttempt, rec, a.Key().String())
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		var exists bool
		if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM alarms WHERE id = $1)`, a.ID).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return fmt.Errorf("alarm %s: %w", a.ID, store.ErrNotFound)
		}
		return fmt.Errorf("alarm %s (version %d): %w", a.ID, a.Version, store.ErrConflict)
	})
	if err != nil {
		return nil, err
	}
	return &n, nil
}

// DeleteAlarm implements store.Store.
func (s *Store) DeleteAlarm(ctx context.Context, id string) error {
	return s.do(ctx, func(q querier) error {
		tag, err := q.Exec(ctx, `DELETE FROM alarms WHERE id = $1`, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("alarm %s: %w", id, store.ErrNotFound)
		}
		return nil
	})
}
