package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"substrate.dev/ate/internal/codec"
	"substrate.dev/ate/internal/store"
)

// The worker view: each Store keeps the workers' names, nodes, labels and
// free-or-held in memory, so ClaimWorker can name its candidates instead
// of searching the table. It is loaded at Open and kept current without
// polling: a trigger NOTIFYs every change of a workers row (with its
// revision, migrations/00001_initial.sql), one dedicated connection per
// Store LISTENs and re-reads the changed rows, and this Store's own
// writes update it as they commit. When the listener's connection is
// lost it reconnects with backoff and reloads the view whole, since
// notifications sent meanwhile are lost.
//
// The view is a hint, never the truth: ClaimWorker locks and re-checks
// every candidate under its row lock and, when the view offers none that
// holds, falls back to an indexed query over the free workers
// (workers.go). So a view a moment stale (another replica's claim not
// yet heard of, a worker just added) costs at most a candidate skipped
// or a query, never a wrong claim or a false store.ErrNoFreeWorker.
// GetWorker and ListWorkers read the table, so they see every committed
// write at once.

// notifyChannel is the channel the workers trigger notifies.
const notifyChannel = "ate_workers"

// viewEntry is what the view knows of one worker.
type viewEntry struct {
	node   string
	labels map[string]string
	free   bool
	// rev is the row's revision (the worker_revs sequence): an entry
	// replaces another only if newer, so a late read cannot undo a newer
	// write's update.
	rev int64
	// gone marks a deleted worker (rev is the deleted row's), so that an
	// older read of the row does not bring it back.
	gone bool
}

// view is the in-memory view of the workers. Safe for concurrent use.
type view struct {
	mu      sync.Mutex
	workers map[string]viewEntry // by name; guarded by mu
}

func newView() *view { return &view{workers: map[string]viewEntry{}} }

// put records a worker's row as read or written, unless the view holds a
// newer revision (or the same one, from a read of the same row).
func (v *view) put(name string, e viewEntry) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if cur, ok := v.workers[name]; ok && cur.rev >= e.rev {
		return
	}
	v.workers[name] = e
}

// remove records the deletion of a worker's row of revision rev, unless
// the view holds a newer one (the name was registered again since).
func (v *view) remove(name string, rev int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if cur, ok := v.workers[name]; ok && cur.rev > rev {
		return
	}
	v.workers[name] = viewEntry{rev: rev, gone: true}
}

// replace makes m the whole view (a reload).
func (v *view) replace(m map[string]viewEntry) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.workers = m
}

// get returns what the view knows of worker name.
func (v *view) get(name string) (viewEntry, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.workers[name]
	return e, ok && !e.gone
}

// candidates returns up to limit names of workers the view believes free,
// on node (any node if empty) and matching selector, in (node, name)
// order, the order of the fallback query and of bolt. It walks every
// entry: cheap for the thousands of workers a deployment has; index by
// node when that stops being so.
func (v *view) candidates(node string, selector map[string]string, limit int) []string {
	type cand struct{ node, name string }
	var cs []cand
	v.mu.Lock()
	for name, e := range v.workers {
		if e.free && !e.gone && (node == "" || e.node == node) && store.MatchLabels(selector, e.labels) {
			cs = append(cs, cand{e.node, name})
		}
	}
	v.mu.Unlock()
	slices.SortFunc(cs, func(a, b cand) int { return cmp.Or(cmp.Compare(a.node, b.node), cmp.Compare(a.name, b.name)) })
	out := make([]string, 0, min(limit, len(cs)))
	for _, c := range cs[:min(limit, len(cs))] {
		out = append(out, c.name)
	}
	return out
}

// viewCols are the workers columns an entry is read from, in scanEntry's
// order.
const viewCols = `name, node, labels, actor_uid IS NULL, rev`

// scanEntry scans viewCols.
func scanEntry(row pgx.Row) (string, viewEntry, error) {
	var name string
	var e viewEntry
	var labels []byte
	if err := row.Scan(&name, &e.node, &labels, &e.free, &e.rev); err != nil {
		return "", e, err
	}
	var err error
	e.labels, err = decodeLabels(name, labels)
	return name, e, err
}

// listen opens the listener's connection, LISTENs, then loads the whole
// view: in that order, so that every change committed after the load is
// notified. The caller owns the connection.
func (s *Store) listen(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return nil, fmt.Errorf("worker view: %w", err)
	}
	if err := s.load(ctx, conn); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("worker view: %w", err)
	}
	return conn, nil
}

func (s *Store) load(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		return err
	}
	rows, err := conn.Query(ctx, `SELECT `+viewCols+` FROM workers`)
	if err != nil {
		return err
	}
	defer rows.Close()
	m := map[string]viewEntry{}
	for rows.Next() {
		name, e, err := scanEntry(rows)
		if err != nil {
			return err
		}
		m[name] = e
	}
	if err := rows.Err(); err != nil {
		return err
	}
	s.view.replace(m)
	return nil
}

// Listener reconnection backoff: doubling from the first to the last.
const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// follow applies notifications from conn to the view until ctx ends,
// reconnecting (and reloading) whenever the connection fails. It closes
// s.done when it returns.
func (s *Store) follow(ctx context.Context, cfg *pgx.ConnConfig, conn *pgx.Conn) {
	defer close(s.done)
	delay := listenBackoffMin
	for {
		if conn != nil {
			err := s.apply(ctx, conn)
			closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = conn.Close(closeCtx)
			cancel()
			conn = nil
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("worker view: listener lost its connection; reconnecting", "err", s.unavailable(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay): // retry pacing, not synchronisation
		}
		var err error
		if conn, err = s.listen(ctx, cfg); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Debug("worker view: reconnect failed", "err", s.unavailable(err), "retry", delay)
			delay = min(2*delay, listenBackoffMax)
			continue
		}
		s.log.Info("worker view: listener reconnected, view reloaded")
		delay = listenBackoffMin
	}
}

// notification is the payload of a workers notification.
type notification struct {
	Name    string `json:"name"`
	Rev     int64  `json:"rev"`
	Deleted bool   `json:"deleted"`
}

// maxBatch bounds how many notifications one refresh query covers.
const maxBatch = 256

// apply waits for notifications on conn and applies them, until the
// connection fails or ctx ends.
func (s *Store) apply(ctx context.Context, conn *pgx.Conn) error {
	// WaitForNotification on a done context returns a notification the
	// connection has already received, or fails at once without touching
	// the connection: a way to take what has arrived without waiting.
	done, cancel := context.WithCancel(ctx)
	cancel()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		batch := []*notification{}
		for n != nil && len(batch) < maxBatch {
			var p notification
			if err := codec.Unmarshal([]byte(n.Payload), &p); err != nil {
				s.log.Error("worker view: bad notification, reloading", "payload", n.Payload, "err", err)
				if err := s.load(ctx, conn); err != nil {
					return err
				}
			} else {
				batch = append(batch, &p)
			}
			n, _ = conn.WaitForNotification(done)
		}
		if err := s.refresh(ctx, conn, batch); err != nil {
			return err
		}
	}
}

// refresh applies a batch of notifications: deletions as they say, and
// changes by re-reading the rows (a row not found was deleted since, and
// its own notification follows).
func (s *Store) refresh(ctx context.Context, conn *pgx.Conn, batch []*notification) error {
	var changed []string
	for _, n := range batch {
		if n.Deleted {
			s.view.remove(n.Name, n.Rev)
		} else {
			changed = append(changed, n.Name)
		}
	}
	if len(changed) == 0 {
		return nil
	}
	rows, err := conn.Query(ctx, `SELECT `+viewCols+` FROM workers WHERE name = ANY($1)`, changed)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		name, e, err := scanEntry(rows)
		if err != nil {
			return err
		}
		s.view.put(name, e)
	}
	return rows.Err()
}
