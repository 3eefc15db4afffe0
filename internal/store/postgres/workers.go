package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"substrate.dev/ate/internal/codec"
	"substrate.dev/ate/internal/store"
)

// encodeLabels is labels as a JSON object; "{}" for none (never JSON
// null, which @> would match nothing against).
func encodeLabels(labels map[string]string) ([]byte, error) {
	if len(labels) == 0 {
		return []byte("{}"), nil
	}
	b, err := codec.Marshal(labels)
	if err != nil {
		return nil, fmt.Errorf("encode labels: %w", err)
	}
	return b, nil
}

// decodeLabels decodes worker name's labels; nil for none, as bolt
// returns them.
func decodeLabels(name string, b []byte) (map[string]string, error) {
	var m map[string]string
	if err := codec.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode worker %s labels: %w", name, err)
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

// workerCols are the workers columns a store.Worker is read from, in
// scanWorker's order, then the view's.
const workerCols = `name, node, tunnel_addr, sandbox_class, labels, actor_uid, actor, rev`

// scanWorker scans workerCols into a worker and its view entry.
func scanWorker(row pgx.Row) (*store.Worker, viewEntry, error) {
	var w store.Worker
	var labels []byte
	var uid, actor *string
	var e viewEntry
	if err := row.Scan(&w.Name, &w.Node, &w.TunnelAddr, &w.SandboxClass, &labels, &uid, &actor, &e.rev); err != nil {
		return nil, e, err
	}
	var err error
	if w.Labels, err = decodeLabels(w.Name, labels); err != nil {
		return nil, e, err
	}
	if uid != nil {
		w.ActorUID = *uid
	}
	if actor != nil {
		if err := w.Actor.UnmarshalText([]byte(*actor)); err != nil {
			return nil, e, fmt.Errorf("decode worker %s: %w", w.Name, err)
		}
	}
	e.node, e.labels, e.free = w.Node, w.Labels, w.Free()
	return &w, e, nil
}

// viewCandidates bounds how many of the view's free workers one claim
// tries under lock before it falls back to the query: enough to get past
// those other replicas took a moment ago, few enough for one statement.
const viewCandidates = 16

// ClaimWorker implements store.Store, in one transaction: the actor's
// row is locked and compare-and-set checked; then a worker is picked and
// bound by a statement that locks its row FOR UPDATE SKIP LOCKED and
// re-checks, under that lock, that it is free, on the node and matching
// the selector (a row another transaction changed meanwhile is re-read
// and re-checked); then the actor is written RESUMING on it. Candidates,
// in order: prefer, then the free workers the view knows (view.go); if
// none holds, the free workers of the table by (node, name), skipping
// rows other claims have locked; and if that finds none, the same
// waiting for those locks, so a claim that rolls back cannot make this
// one answer store.ErrNoFreeWorker while its worker is still free.
func (s *Store) ClaimWorker(ctx context.Context, a *store.Actor, node string, prefer ...string) (outA *store.Actor, outW *store.Worker, err error) {
	sel, err := encodeLabels(a.WorkerSelector)
	if err != nil {
		return nil, nil, err
	}
	// A claim that prefers workers (a standby's) tries those first, so
	// it marks none of the view's as its own.
	viewed, done := s.view.candidates(node, a.WorkerSelector, viewCandidates, len(prefer) == 0)
	defer done() // after the claim's result is in the view (changed)
	candidates := slices.Concat(prefer, viewed)
	var entry viewEntry
	// Two round trips when a candidate holds: BEGIN, the fence, the
	// actor's lock and the candidates' bind in one batch (a bind the
	// checks then refuse is rolled back), the actor's write and COMMIT in
	// the next.
	err = s.pipeline(ctx, func(p *pipe) error {
		f, fenced := store.FenceFrom(ctx)
		b := &pgx.Batch{}
		if fenced {
			b.Queue(fenceQuery, f.Key, f.Holder, f.Token)
		}
		b.Queue(`SELECT record FROM actors WHERE key = $1 FOR UPDATE`, a.Key().String())
		bf := newBinder(a, node, sel)
		if len(candidates) > 0 {
			bf.queueCandidates(b, candidates)
		}
		br := p.SendBatch(ctx, b)
		var fenceErr, actorErr, bindErr error
		var rec []byte
		var w *store.Worker
		var e viewEntry
		if fenced {
			fenceErr = fenceResult(f, br.QueryRow())
		}
		actorErr = br.QueryRow().Scan(&rec)
		if len(candidates) > 0 {
			w, e, bindErr = bf.result(br.QueryRow())
		}
		closeErr := br.Close()
		switch {
		case fenceErr != nil:
			return fenceErr
		case actorErr != nil:
			return fmt.Errorf("actor %s: %w", a.Key(), notFound(actorErr))
		case bindErr != nil:
			return bindErr
		case closeErr != nil:
			return closeErr
		}
		if _, err := checkStored(a, rec); err != nil {
			return err
		}
		if w == nil {
			if w, e, err = bf.bindAny(ctx, p); err != nil {
				return err
			}
		}
		n := *a
		n.State, n.Worker, n.Version = store.Resuming, w.Name, a.Version+1
		n.StateTime = time.Now().UTC()
		wb := &pgx.Batch{}
		if err := queueWriteActor(wb, &n); err != nil {
			return err
		}
		if err := p.commit(ctx, wb); err != nil {
			return actorWriteError(&n, err)
		}
		outA, outW, entry = &n, w, e
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	s.changed(outW.Name, entry)
	return outA, outW, nil
}

// binder binds a free worker to an actor: its candidates first (in the
// claim's first batch), then the table's free workers (SKIP LOCKED),
// then the same waiting for locks.
type binder struct {
	a *store.Actor
	// filter is what every pick re-checks under the row lock; args are
	// its arguments after the actor's uid and key.
	filter string
	args   []any
}

func newBinder(a *store.Actor, node string, sel []byte) *binder {
	bf := &binder{a: a, filter: `actor_uid IS NULL`, args: []any{a.UID, a.Key().String()}}
	if node != "" {
		bf.args = append(bf.args, node)
		bf.filter += fmt.Sprintf(` AND node = $%d`, len(bf.args))
	}
	if len(a.WorkerSelector) > 0 {
		bf.args = append(bf.args, sel)
		bf.filter += fmt.Sprintf(` AND labels @> $%d`, len(bf.args))
	}
	return bf
}

// bindSQL is the statement that binds the worker pick selects.
func bindSQL(pick string) string {
	return `WITH pick AS (` + pick + `)
		UPDATE workers w SET actor_uid = $1, actor = $2 FROM pick WHERE w.name = pick.name
		RETURNING w.name, w.node, w.tunnel_addr, w.sandbox_class, w.labels, w.actor_uid, w.actor, w.rev`
}

// queueCandidates queues on b the bind of the first free candidate,
// driven by the candidates in order, one index lookup each, stopping at
// the first that is free and not locked. Written as name = ANY(…) the
// planner chose, for a generic plan, to walk the node's free workers
// (workers_free) and filter by name: 5.7 ms a claim with 512 workers a
// node, growing with their dead rows, against 0.1 ms (BENCHMARKS.md, The
// PostgreSQL control plane). Written as a join it did the same whenever
// the table's statistics were missing or stale (a cluster's workers just
// registered): it hashed every free worker of the node. The lookup is a
// LATERAL subquery behind OFFSET 0, which the planner cannot turn into
// a join, so it stays a lookup per candidate whatever the statistics.
// The row lock is taken inside the subquery, after its filter (a worker
// not free is never locked), and the candidates come in their order
// (WITH ORDINALITY), so LIMIT 1 stops at the first one locked
// (TestClaimLocksOneCandidate).
func (bf *binder) queueCandidates(b *pgx.Batch, candidates []string) {
	b.Queue(bindSQL(fmt.Sprintf(`SELECT w.name FROM unnest($%d::text[]) WITH ORDINALITY AS c(name, i)
		CROSS JOIN LATERAL (SELECT name FROM workers WHERE name = c.name AND %s OFFSET 0) w
		ORDER BY c.i LIMIT 1 FOR UPDATE OF w SKIP LOCKED`, len(bf.args)+1, bf.filter)), append(slices.Clip(bf.args), candidates)...)
}

// result reads a bind's row: the worker, or nil if none held.
func (bf *binder) result(row pgx.Row) (*store.Worker, viewEntry, error) {
	w, e, err := scanWorker(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, e, nil
	}
	return w, e, err
}

// bindAny binds the first free worker of the table that holds, skipping
// rows other claims have locked, and if that finds none, waiting for
// those locks, so a claim that rolls back cannot make this one answer
// store.ErrNoFreeWorker while its worker is still free.
func (bf *binder) bindAny(ctx context.Context, q querier) (*store.Worker, viewEntry, error) {
	for _, lock := range []string{"FOR UPDATE SKIP LOCKED", "FOR UPDATE"} {
		w, e, err := bf.result(q.QueryRow(ctx, bindSQL(`SELECT name FROM workers WHERE `+bf.filter+` ORDER BY node, name LIMIT 1 `+lock), bf.args...))
		if w != nil || err != nil {
			return w, e, err
		}
	}
	return nil, viewEntry{}, fmt.Errorf("actor %s: %w", bf.a.Key(), store.ErrNoFreeWorker)
}

// queueRelease queues on b the freeing of worker name if actorUID holds
// it; *freed is then its view entry, nil if it was not held (or is
// gone).
func queueRelease(b *pgx.Batch, name, actorUID string, freed **viewEntry) {
	b.Queue(releaseSQL, name, actorUID).QueryRow(func(row pgx.Row) error {
		_, e, err := scanEntry(row)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			*freed = nil
			return nil
		case err != nil:
			return err
		}
		*freed = &e
		return nil
	})
}

const releaseSQL = `UPDATE workers SET actor_uid = NULL, actor = NULL
	WHERE name = $1 AND actor_uid = $2 RETURNING ` + viewCols

// release frees worker name if actorUID holds it, returning its view
// entry; nil if it did not (or is gone).
func release(ctx context.Context, q querier, name, actorUID string) (*viewEntry, error) {
	row := q.QueryRow(ctx, releaseSQL, name, actorUID)
	_, e, err := scanEntry(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &e, nil
}

// PutWorker implements store.Store. A re-registration that changes
// nothing writes nothing (and notifies no one).
func (s *Store) PutWorker(ctx context.Context, w *store.Worker) error {
	labels, err := encodeLabels(w.Labels)
	if err != nil {
		return err
	}
	actor, _ := w.Actor.MarshalText()
	var name string
	var e viewEntry
	err = s.do(ctx, func(q querier) error {
		name, e, err = scanEntry(q.QueryRow(ctx, `
			INSERT INTO workers AS w (name, node, tunnel_addr, sandbox_class, labels, actor_uid, actor)
			VALUES ($1, $2, $3, $4, $5, NULLIF($6, ''), NULLIF($7, ''))
			ON CONFLICT (name) DO UPDATE SET node = excluded.node, tunnel_addr = excluded.tunnel_addr,
				sandbox_class = excluded.sandbox_class, labels = excluded.labels
				WHERE (w.node, w.tunnel_addr, w.sandbox_class, w.labels) IS DISTINCT FROM
					(excluded.node, excluded.tunnel_addr, excluded.sandbox_class, excluded.labels)
			RETURNING `+viewCols, w.Name, w.Node, w.TunnelAddr, w.SandboxClass, labels, w.ActorUID, string(actor)))
		if errors.Is(err, pgx.ErrNoRows) {
			name = "" // unchanged
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("put worker %s: %w", w.Name, err)
	}
	if name != "" {
		s.changed(name, e)
	}
	return nil
}

// GetWorker implements store.Store, from the table.
func (s *Store) GetWorker(ctx context.Context, name string) (out *store.Worker, err error) {
	err = s.do(ctx, func(q querier) error {
		out, _, err = scanWorker(q.QueryRow(ctx, `SELECT `+workerCols+` FROM workers WHERE name = $1`, name))
		if err != nil {
			return fmt.Errorf("worker %s: %w", name, notFound(err))
		}
		return nil
	})
	return out, err
}

// ListWorkers implements store.Store, from the table, in name order.
func (s *Store) ListWorkers(ctx context.Context) (out []*store.Worker, err error) {
	err = s.do(ctx, func(q querier) error {
		out = nil
		rows, err := q.Query(ctx, `SELECT `+workerCols+` FROM workers ORDER BY name`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			w, _, err := scanWorker(rows)
			if err != nil {
				return err
			}
			out = append(out, w)
		}
		return rows.Err()
	})
	return out, err
}

// ReleaseWorker implements store.Store.
func (s *Store) ReleaseWorker(ctx context.Context, name, actorUID string) error {
	var freed *viewEntry
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if err := checkFence(ctx, tx); err != nil {
			return err
		}
		var err error
		freed, err = release(ctx, tx, name, actorUID)
		return err
	})
	if err != nil {
		return err
	}
	if freed != nil {
		s.changed(name, *freed)
	}
	return nil
}

// DeleteWorker implements store.Store.
func (s *Store) DeleteWorker(ctx context.Context, name string) error {
	var rev int64
	err := s.do(ctx, func(q querier) error {
		err := q.QueryRow(ctx, `DELETE FROM workers WHERE name = $1 AND actor_uid IS NULL RETURNING rev`, name).Scan(&rev)
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		rev = 0
		var holder string
		err = q.QueryRow(ctx, `SELECT actor_uid FROM workers WHERE name = $1`, name).Scan(&holder)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return nil
		case err != nil:
			return err
		}
		return fmt.Errorf("worker %s is held by actor %s: %w", name, holder, store.ErrConflict)
	})
	if err != nil {
		return fmt.Errorf("delete worker %s: %w", name, err)
	}
	if rev != 0 {
		s.removed(name, rev)
	}
	return nil
}
