package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pipe is a READ COMMITTED transaction on one connection whose BEGIN
// travels in the first batch sent and whose COMMIT travels in the last
// (commit), so a write that checks in one batch and writes in a second
// costs two round trips, not four: pgx's Tx sends BEGIN and COMMIT each
// on its own. The hot writes of a wake-up (ClaimWorker, UpdateActor) run
// in one; BENCHMARKS.md, The PostgreSQL control plane, has what it saved.
//
// Statements may also go one at a time (Exec, Query, QueryRow, for a
// path that needs each answer before the next): the transaction begins
// with the first of them if no batch has.
type pipe struct {
	conn  *pgx.Conn
	begun bool
	done  bool // committed
}

// pipeline runs fn in a pipe, as tx runs its fn: again when its failure
// left nothing done (retryable), with connection failures mapped to
// store.ErrUnavailable. fn must end with p.commit; a transaction fn left
// open, or whose batch failed, is rolled back before the connection goes
// back to the pool.
func (s *Store) pipeline(ctx context.Context, fn func(p *pipe) error) error {
	began := time.Now()
	err := s.do(ctx, func(querier) error {
		c, err := s.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer c.Release()
		p := &pipe{conn: c.Conn()}
		err = fn(p)
		if err == nil && !p.done {
			err = errors.New("postgres store: a pipelined transaction ended without its commit")
		}
		if p.conn.PgConn().TxStatus() != 'I' {
			// Failed or abandoned: roll back so the connection is idle
			// again (the pool would otherwise close it). A rollback that
			// fails leaves its state unknown; closing it ends the
			// transaction on the server.
			if _, rerr := p.conn.Exec(context.WithoutCancel(ctx), "rollback"); rerr != nil {
				_ = p.conn.Close(context.WithoutCancel(ctx))
			}
		}
		return err
	})
	if o := s.observer.Load(); o != nil && err == nil {
		(*o).Commit(time.Since(began), 1)
	}
	return err
}

// SendBatch sends b, beginning the transaction first in the same round
// trip if nothing has yet; the results are b's.
func (p *pipe) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if p.begun {
		return p.conn.SendBatch(ctx, b)
	}
	p.begun = true
	withBegin := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(b.QueuedQueries)+1)}
	withBegin.Queue("begin")
	withBegin.QueuedQueries = append(withBegin.QueuedQueries, b.QueuedQueries...)
	br := p.conn.SendBatch(ctx, withBegin)
	// BEGIN's own result; if it failed, every later result reports the
	// same error (pgx keeps a batch's first), so the caller sees it.
	_, _ = br.Exec()
	return br
}

// commit sends b's statements, then COMMIT, in one round trip, and runs
// their callbacks (QueuedQuery.Exec, QueryRow, Query); it returns the
// first error. A failed statement leaves COMMIT unrun (the server skips
// the rest of a batch after an error) and the transaction to pipeline's
// rollback.
func (p *pipe) commit(ctx context.Context, b *pgx.Batch) error {
	c := &pgx.Batch{QueuedQueries: append([]*pgx.QueuedQuery(nil), b.QueuedQueries...)}
	var tag pgconn.CommandTag
	c.Queue("commit").Exec(func(ct pgconn.CommandTag) error {
		tag = ct
		return nil
	})
	if err := p.SendBatch(ctx, c).Close(); err != nil {
		return err
	}
	if tag.String() != "COMMIT" {
		// PostgreSQL answers ROLLBACK to a COMMIT of a failed
		// transaction.
		return fmt.Errorf("postgres store: transaction was rolled back (%s): %w", tag, pgx.ErrTxCommitRollback)
	}
	p.done = true
	return nil
}

// begin starts the transaction on its own, for a statement sent alone
// before any batch.
func (p *pipe) begin(ctx context.Context) error {
	if p.begun {
		return nil
	}
	p.begun = true
	_, err := p.conn.Exec(ctx, "begin")
	return err
}

// Exec implements querier inside the transaction.
func (p *pipe) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := p.begin(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return p.conn.Exec(ctx, sql, args...)
}

// Query implements querier inside the transaction.
func (p *pipe) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := p.begin(ctx); err != nil {
		return nil, err
	}
	return p.conn.Query(ctx, sql, args...)
}

// QueryRow implements querier inside the transaction.
func (p *pipe) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := p.begin(ctx); err != nil {
		return errRow{err}
	}
	return p.conn.QueryRow(ctx, sql, args...)
}

// errRow is a pgx.Row whose Scan fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
