package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/btree"
	"github.com/jackc/pgx/v5"

	"substrate.dev/ate/internal/codec"
	"substrate.dev/ate/internal/store"
)

// The worker view: each Store keeps the workers' names, nodes, labels and
// free-or-held in memory, so ClaimWorker can name its candidates instead
// of searching the table. It is loaded at Open and kept current without
// polling: every Store announces each change it commits to a workers row
// (name, revision, deleted) on a NOTIFY channel, batched, after the
// commit and outside the writing transaction (announce); one dedicated
// connection per Store LISTENs and re-reads the rows other Stores
// announce, and this Store's own writes update its view as they commit.
//
// Why not a trigger inside the write, as before migration 00008: a
// transaction that has issued NOTIFY takes one lock on the whole
// database cluster at commit and holds it through its WAL flush, so
// every claim and release committed one at a time behind every other
// (issue 33). Sent after the commit, a round of announcements costs one
// small transaction for every change committed meanwhile.
//
// An announcement sent after the commit can be lost where a trigger's
// could not: the writing process dies between the two, or the database
// is unreachable longer than the announcer keeps what it holds. And when
// the listener's connection is lost, notifications sent meanwhile are
// lost too. So the listener reloads the view whole when it reconnects
// and every Options.ViewResync (30 s by default) in any case: that bounds
// how long any change can stay unheard.
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
	// free indexes the free workers by (node, name), the order claims try
	// them in, so that a claim reads its few candidates without walking
	// every worker: flat from a thousand workers to a hundred thousand.
	// Guarded by mu.
	free *btree.BTreeG[freeKey]
	// claiming counts the claims under way whose first candidate each
	// worker is (candidates). Guarded by mu.
	claiming map[string]int
}

// freeKey is a free worker's place in view.free.
type freeKey struct{ node, name string }

func (a freeKey) less(b freeKey) bool {
	return a.node < b.node || (a.node == b.node && a.name < b.name)
}

// freeDegree is view.free's B-tree degree.
const freeDegree = 32

func newView() *view {
	return &view{workers: map[string]viewEntry{}, free: btree.NewG(freeDegree, freeKey.less), claiming: map[string]int{}}
}

// set makes e worker name's entry, keeping free in step; v.mu is held.
func (v *view) set(name string, e viewEntry) {
	if cur, ok := v.workers[name]; ok && cur.free && !cur.gone {
		v.free.Delete(freeKey{cur.node, name})
	}
	v.workers[name] = e
	if e.free && !e.gone {
		v.free.ReplaceOrInsert(freeKey{e.node, name})
	}
}

// put records a worker's row as read or written, unless the view holds a
// newer revision (or the same one, from a read of the same row).
func (v *view) put(name string, e viewEntry) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if cur, ok := v.workers[name]; ok && cur.rev >= e.rev {
		return
	}
	v.set(name, e)
}

// remove records the deletion of a worker's row of revision rev, unless
// the view holds a newer one (the name was registered again since).
func (v *view) remove(name string, rev int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if cur, ok := v.workers[name]; ok && cur.rev > rev {
		return
	}
	v.set(name, viewEntry{rev: rev, gone: true})
}

// replace makes m the whole view (a reload).
func (v *view) replace(m map[string]viewEntry) {
	free := btree.NewG(freeDegree, freeKey.less)
	for name, e := range m {
		if e.free && !e.gone {
			free.ReplaceOrInsert(freeKey{e.node, name})
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.workers, v.free = m, free
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
// order, the order of the fallback query and of bolt. It walks the free
// workers in that order until it has limit: a few for a claim without a
// selector, however many workers there are; with a selector few workers
// match, as many as it takes.
//
// Workers that are the first candidate of a claim of this Store still
// under way go last, and, with mark, the first candidate returned
// becomes one until the caller calls done (after it has put its claim's
// result in the view). Without this, claims at once all tried the same
// first few workers: each locked or re-checked the ones the others were
// binding (SKIP LOCKED), and at 1024 clients some found none left and
// fell back to the query (BENCHMARKS.md, issue 33). A claim alone sees
// none under way, so it still gets the first free worker in order. The
// walk passes over at most passedOver claimed workers, so however many
// claims are under way it stays short under v.mu; past that the claim
// shares candidates, as before.
func (v *view) candidates(node string, selector map[string]string, limit int, mark bool) (out []string, done func()) {
	var later []string
	v.mu.Lock()
	defer v.mu.Unlock()
	v.free.AscendGreaterOrEqual(freeKey{node: node}, func(k freeKey) bool {
		if node != "" && k.node != node {
			return false
		}
		if store.MatchLabels(selector, v.workers[k.name].labels) {
			if v.claiming[k.name] > 0 {
				later = append(later, k.name)
			} else {
				out = append(out, k.name)
			}
		}
		return len(out) < limit && len(later) < passedOver
	})
	out = append(out, later...)
	out = out[:min(len(out), limit)]
	if len(out) == 0 || !mark {
		return out, func() {}
	}
	first := out[0]
	v.claiming[first]++
	return out, func() {
		v.mu.Lock()
		defer v.mu.Unlock()
		if v.claiming[first]--; v.claiming[first] == 0 {
			delete(v.claiming, first)
		}
	}
}

// passedOver bounds how many workers other claims under way are binding
// one claim's walk of the view passes over (candidates).
const passedOver = 64

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

// defaultViewResync is Options.ViewResync's default.
const defaultViewResync = 30 * time.Second

// follow applies announcements from conn to the view until ctx ends,
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

// notification is one announced change of a workers row.
type notification struct {
	Name    string `json:"name"`
	Rev     int64  `json:"rev"`
	Deleted bool   `json:"deleted,omitempty"`
}

// announcement is the payload of one NOTIFY: changes one Store
// committed, From naming the Store (its listener skips its own).
type announcement struct {
	From    string         `json:"from"`
	Changes []notification `json:"changes"`
}

// maxBatch bounds how many changes one refresh query covers.
const maxBatch = 256

// apply waits for announcements on conn and applies them, until the
// connection fails or ctx ends, reloading the view whole every
// s.resync.
func (s *Store) apply(ctx context.Context, conn *pgx.Conn) error {
	// WaitForNotification on a done context returns a notification the
	// connection has already received, or fails at once without touching
	// the connection: a way to take what has arrived without waiting.
	done, cancel := context.WithCancel(ctx)
	cancel()
	resyncAt := time.Now().Add(s.resync)
	for {
		// A wait that reaches its deadline leaves the connection usable:
		// pgconn's default context handler sets a read deadline, and a
		// timeout does not close the connection.
		wait, cancel := context.WithDeadline(ctx, resyncAt)
		n, err := conn.WaitForNotification(wait)
		cancel()
		if err != nil && ctx.Err() == nil && wait.Err() != nil {
			if err := s.load(ctx, conn); err != nil {
				return err
			}
			resyncAt = time.Now().Add(s.resync)
			continue
		}
		if err != nil {
			return err
		}
		var batch []notification
		for n != nil && len(batch) < maxBatch {
			var a announcement
			if err := codec.Unmarshal([]byte(n.Payload), &a); err != nil {
				s.log.Error("worker view: bad announcement, reloading", "payload", n.Payload, "err", err)
				if err := s.load(ctx, conn); err != nil {
					return err
				}
			} else if a.From != s.id {
				batch = append(batch, a.Changes...)
			}
			n, _ = conn.WaitForNotification(done)
		}
		if err := s.refresh(ctx, conn, batch); err != nil {
			return err
		}
	}
}

// refresh applies a batch of changes: deletions as they say, and
// changes by re-reading the rows (a row not found was deleted since, and
// its own announcement follows).
func (s *Store) refresh(ctx context.Context, conn *pgx.Conn, batch []notification) error {
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

// changed records in this Store's view a change it committed to worker
// name's row, and announces it to the others.
func (s *Store) changed(name string, e viewEntry) {
	s.view.put(name, e)
	s.announce(notification{Name: name, Rev: e.rev})
}

// removed records in this Store's view its deletion of worker name's
// row of revision rev, and announces it to the others.
func (s *Store) removed(name string, rev int64) {
	s.view.remove(name, rev)
	s.announce(notification{Name: name, Rev: rev, Deleted: true})
}

// announcer holds the changes this Store committed and has not yet
// announced.
type announcer struct {
	mu      sync.Mutex
	pending []notification // guarded by mu
	kick    chan struct{}  // capacity 1: a send round is wanted
}

// maxPending bounds the changes held while announcements fail (the
// database unreachable): past it the oldest are dropped, and the other
// Stores' resync (Options.ViewResync) brings what they said.
const maxPending = 100_000

// maxPayload bounds one NOTIFY payload; PostgreSQL refuses 8000 bytes.
const maxPayload = 7000

// announce queues n for the next round.
func (s *Store) announce(n notification) {
	a := &s.announcer
	a.mu.Lock()
	if len(a.pending) >= maxPending {
		a.pending = a.pending[1:]
	}
	a.pending = append(a.pending, n)
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// announceLoop sends the pending changes, one statement per round, until
// ctx ends, then sends what is left once (bounded by a second). Changes
// committed while a round is in flight go in the next: the rounds batch
// themselves as the write rate grows. It closes s.announced when it
// returns.
func (s *Store) announceLoop(ctx context.Context) {
	defer close(s.announced)
	delay := listenBackoffMin
	for {
		select {
		case <-ctx.Done():
			last, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			if err := s.sendPending(last); err != nil {
				s.log.Debug("worker view: last announcements not sent", "err", s.unavailable(err))
			}
			cancel()
			return
		case <-s.announcer.kick:
		}
		if err := s.sendPending(ctx); err != nil {
			if ctx.Err() != nil {
				continue
			}
			s.log.Warn("worker view: announcing worker changes failed; retrying", "err", s.unavailable(err), "retry", delay)
			select {
			case <-ctx.Done():
			case <-time.After(delay): // retry pacing, not synchronisation
			}
			delay = min(2*delay, listenBackoffMax)
			select {
			case s.announcer.kick <- struct{}{}:
			default:
			}
			continue
		}
		delay = listenBackoffMin
	}
}

// sendPending announces every pending change in one statement (one
// NOTIFY per payload of at most maxPayload bytes); on failure the
// changes stay pending.
func (s *Store) sendPending(ctx context.Context) error {
	a := &s.announcer
	a.mu.Lock()
	batch := a.pending
	a.pending = nil
	a.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	payloads, err := s.payloads(batch)
	if err == nil {
		_, err = s.async.Exec(ctx, `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`, notifyChannel, payloads)
	}
	if err != nil {
		a.mu.Lock()
		a.pending = append(batch, a.pending...)
		if over := len(a.pending) - maxPending; over > 0 {
			a.pending = a.pending[over:]
		}
		a.mu.Unlock()
		return fmt.Errorf("announce %d worker changes: %w", len(batch), err)
	}
	return nil
}

// payloads encodes changes as announcements of at most maxPayload bytes.
// A change too large for any (a worker name of kilobytes) is left out
// and logged: the other Stores' resync brings it.
func (s *Store) payloads(changes []notification) ([]string, error) {
	var out []string
	var cur []string // encoded changes of the payload being built
	size := 0
	head := len(`{"from":"","changes":[]}`) + len(s.id)
	flush := func() {
		if len(cur) > 0 {
			out = append(out, `{"from":"`+s.id+`","changes":[`+strings.Join(cur, ",")+`]}`)
			cur, size = nil, 0
		}
	}
	for _, n := range changes {
		b, err := codec.Marshal(n)
		if err != nil {
			return nil, err
		}
		if head+len(b) > maxPayload {
			s.log.Warn("worker view: a change too large to announce; other API servers learn it at their next resync", "worker", n.Name)
			continue
		}
		if head+size+len(b)+1 > maxPayload {
			flush()
		}
		cur = append(cur, string(b))
		size += len(b) + 1
	}
	flush()
	return out, nil
}
