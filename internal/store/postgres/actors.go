package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
)

// lockActor locks a's row FOR UPDATE and checks a's UID and Version
// against it, returning the stored actor.
func lockActor(ctx context.Context, tx pgx.Tx, a *store.Actor) (*store.Actor, error) {
	var rec []byte
	if err := tx.QueryRow(ctx, `SELECT record FROM actors WHERE key = $1 FOR UPDATE`, a.Key().String()).Scan(&rec); err != nil {
		return nil, fmt.Errorf("actor %s: %w", a.Key(), notFound(err))
	}
	return checkStored(a, rec)
}

// checkStored decodes the stored record rec of a's row and checks a's
// UID and Version against it (compare-and-set), returning it.
func checkStored(a *store.Actor, rec []byte) (*store.Actor, error) {
	key := a.Key().String()
	cur, err := decode[store.Actor]("actor "+key, rec)
	if err != nil {
		return nil, err
	}
	if cur.UID != a.UID || cur.Version != a.Version {
		return nil, fmt.Errorf("actor %s (version %d, stored %d): %w", key, a.Version, cur.Version, store.ErrConflict)
	}
	return cur, nil
}

// queueWriteActor queues the write of n over its row (the record and
// the columns from it) on b.
func queueWriteActor(b *pgx.Batch, n *store.Actor) error {
	key := n.Key().String()
	rec, err := encode("actor "+key, n)
	if err != nil {
		return err
	}
	b.Queue(`UPDATE actors SET uid = $2, template = $3, version = $4, state = $5,
		worker = NULLIF($6, ''), record = $7 WHERE key = $1`,
		key, n.UID, n.Template, n.Version, string(n.State), n.Worker, rec).Exec(func(pgconn.CommandTag) error { return nil })
	return nil
}

// actorWriteError names what a failed actor write of n broke.
func actorWriteError(n *store.Actor, err error) error {
	if code, _ := pgCode(err); code == foreignKeyViolation {
		return fmt.Errorf("actor %s: template %s: %w", n.Key(), n.Template, store.ErrNotFound)
	}
	return err
}

// lockForUpdate runs UpdateActor's checks in one round trip (a batch of
// the fence check, the actor's row lock and, if a keeps a worker, that
// worker's FOR SHARE lock, in the order they would run alone; three round
// trips of every fenced write of a wake-up were one each) and returns
// the stored actor.
func lockForUpdate(ctx context.Context, tx batchSender, a *store.Actor) (*store.Actor, error) {
	key := a.Key().String()
	f, fenced := store.FenceFrom(ctx)
	b := &pgx.Batch{}
	if fenced {
		b.Queue(fenceQuery, f.Key, f.Holder, f.Token)
	}
	b.Queue(`SELECT record FROM actors WHERE key = $1 FOR UPDATE`, key)
	if a.Worker != "" {
		b.Queue(`SELECT actor_uid FROM workers WHERE name = $1 FOR SHARE`, a.Worker)
	}
	br := tx.SendBatch(ctx, b)
	var (
		rec                           []byte
		holder                        *string
		fenceErr, actorErr, workerErr error
	)
	if fenced {
		fenceErr = fenceResult(f, br.QueryRow())
	}
	actorErr = br.QueryRow().Scan(&rec)
	if a.Worker != "" {
		workerErr = br.QueryRow().Scan(&holder)
	}
	closeErr := br.Close()
	switch {
	case fenceErr != nil:
		return nil, fenceErr
	case actorErr != nil:
		return nil, fmt.Errorf("actor %s: %w", key, notFound(actorErr))
	case workerErr != nil && !errors.Is(workerErr, pgx.ErrNoRows):
		return nil, workerErr
	case closeErr != nil:
		return nil, closeErr
	}
	cur, err := checkStored(a, rec)
	if err != nil {
		return nil, err
	}
	if a.Worker != "" && (a.Worker != cur.Worker || workerErr != nil || holder == nil || *holder != a.UID) {
		return nil, fmt.Errorf("actor %s: worker %s is not held by it: %w", a.Key(), a.Worker, store.ErrConflict)
	}
	return cur, nil
}

// UpdateActor implements store.Store. A worker a keeps is locked FOR
// SHARE while checked, so it cannot be freed, claimed or deleted before
// the write commits.
func (s *Store) UpdateActor(ctx context.Context, a *store.Actor) (out *store.Actor, err error) {
	var freed *viewEntry
	var freedName string
	// Two round trips: BEGIN and the checks, then the writes and COMMIT.
	err = s.pipeline(ctx, func(p *pipe) error {
		freed = nil
		cur, err := lockForUpdate(ctx, p, a)
		if err != nil {
			return err
		}
		b := &pgx.Batch{}
		if cur.Worker != "" && cur.Worker != a.Worker {
			queueRelease(b, cur.Worker, cur.UID, &freed)
			freedName = cur.Worker
		}
		n := *a
		n.Version++
		out = &n
		if err := queueWriteActor(b, &n); err != nil {
			return err
		}
		return actorWriteError(&n, p.commit(ctx, b))
	})
	if err != nil {
		return nil, err
	}
	if freed != nil {
		s.changed(freedName, *freed)
	}
	return out, nil
}

// DeleteActor implements store.Store.
func (s *Store) DeleteActor(ctx context.Context, a *store.Actor) error {
	var freed *viewEntry
	var freedName string
	err := s.tx(ctx, func(tx pgx.Tx) error {
		freed = nil
		if err := checkFence(ctx, tx); err != nil {
			return err
		}
		cur, err := lockActor(ctx, tx, a)
		if err != nil {
			return err
		}
		if cur.Worker != "" {
			if freed, err = release(ctx, tx, cur.Worker, cur.UID); err != nil {
				return err
			}
			freedName = cur.Worker
		}
		_, err = tx.Exec(ctx, `DELETE FROM actors WHERE key = $1`, a.Key().String())
		return err
	})
	if err != nil {
		return err
	}
	if freed != nil {
		s.changed(freedName, *freed)
	}
	return nil
}

// RecordActivity implements store.Store: one transaction that locks the
// named actors' rows in key order (the order every multi-actor lock
// takes), applies the activities in the order given, and writes those
// that moved.
func (s *Store) RecordActivity(ctx context.Context, acts []names.Activity) error {
	if len(acts) == 0 {
		return nil
	}
	keys := make([]string, 0, len(acts))
	for _, act := range acts {
		keys = append(keys, act.Actor.String())
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	return s.tx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT key, record FROM actors WHERE key = ANY($1) ORDER BY key FOR UPDATE`, keys)
		if err != nil {
			return err
		}
		stored := map[string]*store.Actor{}
		for rows.Next() {
			var key string
			var rec []byte
			if err := rows.Scan(&key, &rec); err != nil {
				rows.Close()
				return err
			}
			a, err := decode[store.Actor]("actor "+key, rec)
			if err != nil {
				rows.Close()
				return err
			}
			stored[key] = a
		}
		if err := rows.Err(); err != nil {
			return err
		}
		var changed []*store.Actor
		seen := map[*store.Actor]bool{}
		for _, act := range acts {
			a := stored[act.Actor.String()]
			if a == nil || !act.Last.After(a.LastActivity) {
				continue // unknown, or not newer
			}
			a.LastActivity = act.Last
			a.Version++
			if !seen[a] {
				seen[a] = true
				changed = append(changed, a)
			}
		}
		if len(changed) == 0 {
			return nil
		}
		batch := &pgx.Batch{}
		for _, a := range changed {
			rec, err := encode("actor "+a.Key().String(), a)
			if err != nil {
				return err
			}
			batch.Queue(`UPDATE actors SET version = $2, record = $3 WHERE key = $1`, a.Key().String(), a.Version, rec)
		}
		return tx.SendBatch(ctx, batch).Close()
	})
}
