package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"substrate.dev/ate/internal/store"
)

// eventsLock is the advisory lock key AppendEvent serialises on (an
// arbitrary constant, "ateevent" in ASCII), so seq order is commit order.
const eventsLock int64 = 0x6174656576656e74

// AppendEvent implements store.Store.
func (s *Store) AppendEvent(ctx context.Context, e *store.Event) error {
	return s.AppendEvents(ctx, []*store.Event{e})
}

// AppendEvents implements store.Store in one round trip: the lock and
// every insert go in one batch without BEGIN or COMMIT, which PostgreSQL
// runs as one implicit transaction (everything up to the batch's Sync
// commits together, or nothing does), the lock held to its end.
func (s *Store) AppendEvents(ctx context.Context, es []*store.Event) error {
	if len(es) == 0 {
		return nil
	}
	recs := make([][]byte, len(es))
	for i, e := range es {
		var err error
		if recs[i], err = encode("event", e); err != nil {
			return err
		}
	}
	seqs := make([]int64, len(es))
	began := time.Now()
	err := s.do(ctx, func(q querier) error {
		b := &pgx.Batch{}
		b.Queue(`SELECT pg_advisory_xact_lock($1)`, eventsLock)
		for i, e := range es {
			b.Queue(`INSERT INTO events (atespace, actor, time, record) VALUES ($1, $2, $3, $4) RETURNING seq`,
				e.Atespace, e.Actor, e.Time, recs[i]).QueryRow(func(row pgx.Row) error { return row.Scan(&seqs[i]) })
		}
		return q.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return err
	}
	if o := s.observer.Load(); o != nil {
		(*o).Commit(time.Since(began), 1)
	}
	for i, e := range es {
		e.Seq = seqs[i]
	}
	return nil
}

// ListEvents implements store.Store.
func (s *Store) ListEvents(ctx context.Context, f store.EventFilter) (out []*store.Event, err error) {
	where, args := []string{"seq > $1"}, []any{f.After}
	if f.Atespace != "" {
		args = append(args, f.Atespace)
		where = append(where, fmt.Sprintf("atespace = $%d", len(args)))
	}
	if f.Actor != "" {
		args = append(args, f.Actor)
		where = append(where, fmt.Sprintf("actor = $%d", len(args)))
	}
	q := `SELECT seq, record FROM events WHERE ` + strings.Join(where, " AND ")
	order := " ORDER BY seq"
	if f.Newest && f.Limit > 0 {
		order = " ORDER BY seq DESC"
	}
	q += order
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	err = s.do(ctx, func(qr querier) error {
		out = nil
		rows, err := qr.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var seq int64
			var rec []byte
			if err := rows.Scan(&seq, &rec); err != nil {
				return err
			}
			e, err := decode[store.Event]("event", rec)
			if err != nil {
				return err
			}
			e.Seq = seq
			out = append(out, e)
		}
		return rows.Err()
	})
	if f.Newest && f.Limit > 0 {
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out, err
}

// PruneEvents implements store.Store.
func (s *Store) PruneEvents(ctx context.Context, before time.Time, keep int) (n int, err error) {
	err = s.do(ctx, func(q querier) error {
		tag, err := q.Exec(ctx, `DELETE FROM events WHERE time < $1
			OR seq <= (SELECT seq FROM events ORDER BY seq DESC OFFSET $2 LIMIT 1)`, before, keep)
		if err != nil {
			return err
		}
		n = int(tag.RowsAffected())
		return nil
	})
	return n, err
}
