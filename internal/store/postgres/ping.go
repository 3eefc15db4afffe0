package postgres

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// pinger keeps the one connection Ping uses.
type pinger struct {
	mu   sync.Mutex
	conn *pgx.Conn
	// closed: the Store is closed, and Ping dials no more.
	closed bool
}

// Ping reports whether the server answers a round trip within ctx, on a
// connection of its own: the pool's may all be busy with a replica's
// load, and a ping queued behind them would call a busy store
// unreachable. A failed ping closes that connection, so the next one
// dials again (a restarted server, a healed partition). Errors wrap
// store.ErrUnavailable when the server cannot be reached.
func (s *Store) Ping(ctx context.Context) error {
	s.ping.mu.Lock()
	defer s.ping.mu.Unlock()
	if s.ping.closed {
		return errors.New("postgres store closed")
	}
	if s.ping.conn == nil || s.ping.conn.IsClosed() {
		c, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig)
		if err != nil {
			return s.unavailable(err)
		}
		s.ping.conn = c
	}
	if err := s.ping.conn.Ping(ctx); err != nil {
		s.ping.closeLocked()
		return s.unavailable(err)
	}
	return nil
}

// closeLocked closes the ping connection, if any; s.ping.mu is held.
func (p *pinger) closeLocked() {
	if p.conn == nil {
		return
	}
	// Bounded: over a cut connection the goodbye is never acknowledged.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = p.conn.Close(ctx)
	p.conn = nil
}

// close closes the ping connection for good, for Store.Close.
func (p *pinger) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.closeLocked()
}
