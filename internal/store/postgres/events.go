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

// AppendEvents implements store.Store: the lock and every insert go in
// one batch, a single round trip between BEGIN and COMMIT.
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
	err := s.tx(ctx, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(`SELECT pg_advisory_xact_lock($1)`, eventsLock)
		for i, e := range es {
			b.Queue(`INSERT INTO events (atespace, actor, time, record) VALUES ($1, $2, $3, $4) RETURNING seq`,
				e.Atespace, e.Actor, e.Time, recs[i])
		}
		br := tx.SendBatch(ctx, b)
		if _, err := br.Exec(); err != nil {
			br.Close()
			return err
		}
		for i := range es {
			if err := br.QueryRow().Scan(&seqs[i]); err != nil {
				br.Close()
				return err
			}
		}
		return br.Close()
	})
	if err != nil {
		return err
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
