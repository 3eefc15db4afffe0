// Package postgres is the PostgreSQL Store backend, for several API
// servers sharing one database (the embedded default is bolt). It uses
// pgx's pool; the schema is versioned with goose migrations embedded in
// the binary and applied by Open (migrate.go).
//
// Every operation is one statement or one READ COMMITTED transaction.
// Compare-and-set writes lock the actor's row (FOR UPDATE) before
// checking its uid and version; the claim of a worker locks the worker's
// row too and re-checks it under the lock (workers.go), so concurrent
// replicas never bind a worker twice. Rows are locked in one order:
// lease (for a fenced write), then actor(s) in key order, then worker;
// so transactions cannot deadlock each other.
//
// Records are stored as bolt stores them (JSON, internal/codec) beside
// real columns for what queries filter, join and lock on
// (migrations/00001_initial.sql). Times are in the JSON and round-trip
// exactly (nanoseconds); only leases' expiries are the database's
// timestamptz (microseconds), computed and compared by the database
// clock.
//
// Errors: the store's sentinels as bolt returns them, and
// store.ErrUnavailable (wrapping the driver's error, naming host:port)
// when the database cannot be reached: refused, reset or broken
// connections, and a server shutting down or starting up. A write whose
// connection broke during COMMIT may have committed; callers re-read, as
// after store.ErrConflict.
package postgres

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sys/unix"

	"substrate.dev/ate/internal/store"
)

// Options configure Open.
type Options struct {
	// Logger receives the store's logs: migrations applied, and the
	// worker view's listener losing and regaining its connection. Nil
	// discards them.
	Logger *slog.Logger
	// ViewResync is how often the worker view is reloaded whole, which
	// bounds how long a lost announcement of another replica's change
	// can keep it stale (view.go); 0 means 30 s.
	ViewResync time.Duration

	// tracer, if set, sees every statement of the pool (tests).
	tracer pgx.QueryTracer
}

// defaultConnectTimeout bounds each connection attempt when the URL sets
// no connect_timeout: an unreachable server fails a call in seconds, not
// the kernel's minutes of SYN retries.
const defaultConnectTimeout = 10 * time.Second

// tcpUserTimeout closes a connection whose sent data the server's
// machine has not acknowledged for this long (TCP_USER_TIMEOUT): a
// partition between a replica and PostgreSQL then fails the statements
// waiting on it (UNAVAILABLE, which clients retry on another replica)
// instead of holding them until the link heals and TCP's backed-off
// retransmission finds it (the chaos run's replica–PostgreSQL cuts:
// recovery after the heal 8.5 s before, 6.5 s after; BENCHMARKS.md,
// Chaos runs). A busy or stopped server still acknowledges at once: its
// kernel does, so only a lost network counts.
const tcpUserTimeout = 5 * time.Second

// dialer is pgx's default dialer (keepalive every 5 minutes) with
// tcpUserTimeout.
var dialer = &net.Dialer{KeepAlive: 5 * time.Minute, Control: func(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(tcpUserTimeout.Milliseconds()))
	})
	return cmp.Or(err, serr)
}}

// defaultMaxConns bounds the pool when the URL does not (pool_max_conns):
// pgxpool's own default, max(4, CPUs), queued a 2-core API server's
// workflows behind 4 connections, each waiting on a round trip (BENCHMARKS.md,
// Record stores).
const defaultMaxConns = 32

// asyncConnsShare: the async pool (Store.async) has this fraction of
// the main pool's connections; its statements are short and never wait
// for an fsync.
const asyncConnsShare = 4

// maxAttempts bounds how often one operation runs when its failure left
// nothing done (a pooled connection found dead before anything was sent,
// a serialization failure or deadlock).
const maxAttempts = 3

// Store is a PostgreSQL-backed store.Store. Safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	// async is a second, smaller pool whose sessions commit without
	// waiting for the WAL flush (synchronous_commit off), for the writes
	// a crash may lose safely: acquiring and releasing leases (a lost
	// acquisition fails its holder's next fenced write, ErrFenced; a
	// lost release delays other replicas by one lease term after a
	// database crash; any durable commit after them flushes them too,
	// the WAL being one sequence; an alarm's lease lost so may deliver
	// it twice, which alarms allow: at least once) and the worker view's
	// announcements (the view's resync bounds a lost one). Each such
	// write waited for an fsync of its own: four of a wake-up's nine
	// durable commits (BENCHMARKS.md, The PostgreSQL control plane).
	async *pgxpool.Pool
	addr  string // "host:port" of the server, for errors and logs
	log   *slog.Logger
	// view is the in-memory view of the workers that ClaimWorker picks
	// candidates from (view.go).
	view *view
	// id names this Store in its announcements, so its listener skips
	// its own.
	id string
	// resync is Options.ViewResync with its default.
	resync time.Duration
	// announcer holds this Store's worker changes to announce (view.go).
	announcer announcer
	// stop ends the view's listener and the announcer; done and
	// announced are closed once each has.
	stop      context.CancelFunc
	done      chan struct{}
	announced chan struct{}
	// observer, if set, is told of every transaction tx commits.
	observer atomic.Pointer[store.CommitObserver]
	// ping is Ping's connection.
	ping pinger
}

var (
	_ store.Store          = (*Store)(nil)
	_ store.CommitObserved = (*Store)(nil)
)

// SetCommitObserver implements store.CommitObserved: o learns of every
// transaction that commits (one write each, its duration with retries).
func (s *Store) SetCommitObserver(o store.CommitObserver) {
	if o == nil {
		s.observer.Store(nil)
		return
	}
	s.observer.Store(&o)
}

// Open connects to the database at rawURL (postgres://… or
// postgresql://…, with libpq's parameters: sslmode, connect_timeout,
// pool_max_conns, …), applies the embedded migrations, loads the worker
// view and starts its listener. Defaults: connect_timeout 10 s;
// pool_max_conns defaultMaxConns (32); beside that pool, a quarter as
// many connections commit what a crash may lose (Store.async), and one
// more listens for worker changes.
//
// Errors: store.ErrUnavailable (naming host:port) when the server cannot
// be reached within ctx or the connect timeout, for the caller to retry
// with backoff; ErrSchemaTooNew when a newer ate has migrated the
// database; others (a bad URL, failed authentication, a failed
// migration naming its file) are not worth retrying.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, errors.New("postgres store: the URL must be postgres://… or postgresql://…")
	}
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	if !strings.Contains(rawURL, "connect_timeout=") {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	cfg.ConnConfig.DialFunc = dialer.DialContext
	if !strings.Contains(rawURL, "pool_max_conns=") {
		cfg.MaxConns = defaultMaxConns
	}
	if opts.tracer != nil {
		cfg.ConnConfig.Tracer = opts.tracer
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "ate"
	}
	// Every transaction of the store is READ COMMITTED, whatever the
	// server's or the role's default: its writes re-check rows they
	// waited for, and LeaseActor's read must see the write its lease's
	// acquisition waited for, which needs each statement's own snapshot.
	// Under REPEATABLE READ that read would be silently stale.
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "read committed"
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{
		addr:      net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))),
		log:       log.With("store", "postgres"),
		id:        rand.Text(),
		resync:    cmp.Or(opts.ViewResync, defaultViewResync),
		announcer: announcer{kick: make(chan struct{}, 1)},
		done:      make(chan struct{}),
		announced: make(chan struct{}),
	}
	if s.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	acfg := cfg.Copy()
	acfg.MaxConns = max(1, cfg.MaxConns/asyncConnsShare)
	acfg.MinConns = min(acfg.MinConns, acfg.MaxConns)
	acfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	if s.async, err = pgxpool.NewWithConfig(ctx, acfg); err != nil {
		s.pool.Close()
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	if err := s.open(ctx, cfg); err != nil {
		s.pool.Close()
		s.async.Close()
		if mode := u.Query().Get("sslmode"); strings.HasPrefix(mode, "verify-") || mode == "require" {
			if strings.Contains(err.Error(), "server refused TLS connection") {
				// A configuration error, not an outage to wait out.
				return nil, fmt.Errorf("open postgres store: the server at %s does not offer TLS, and the URL says sslmode=%s: %w", s.addr, mode, err)
			}
		}
		return nil, fmt.Errorf("open postgres store: %w", s.unavailable(err))
	}
	return s, nil
}

// open checks the server answers, migrates, and starts the view.
func (s *Store) open(ctx context.Context, cfg *pgxpool.Config) error {
	if err := s.pool.Ping(ctx); err != nil {
		return err
	}
	if err := migrate(ctx, cfg.ConnConfig, migrations(), s.log); err != nil {
		return err
	}
	s.view = newView()
	conn, err := s.listen(ctx, cfg.ConnConfig)
	if err != nil {
		return err
	}
	lctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stop = stop
	go s.follow(lctx, cfg.ConnConfig, conn)
	go s.announceLoop(lctx)
	return nil
}

// Close stops the worker view's listener and closes every connection,
// waiting for operations in flight; operations after Close fail.
func (s *Store) Close() error {
	s.stop()
	<-s.done
	<-s.announced
	s.ping.close()
	s.pool.Close()
	s.async.Close()
	return nil
}

// String describes the store for logs.
func (s *Store) String() string { return "postgres:" + s.addr }

// batchSender is what both a pgx transaction and a pipe send batches
// with.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// querier is what both the pool and a transaction run statements with.
type querier interface {
	batchSender
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// do runs fn on the pool (each statement autocommits), again when its
// failure left nothing done (retryable), and maps connection failures to
// store.ErrUnavailable. fn may run more than once and must set its
// results anew each time.
func (s *Store) do(ctx context.Context, fn func(q querier) error) error {
	return s.doOn(ctx, s.pool, fn)
}

// doAsync is do on the async pool, for writes a crash may lose
// (Store.async).
func (s *Store) doAsync(ctx context.Context, fn func(q querier) error) error {
	return s.doOn(ctx, s.async, fn)
}

func (s *Store) doOn(ctx context.Context, pool *pgxpool.Pool, fn func(q querier) error) error {
	var err error
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		if err = fn(pool); err == nil || !retryable(err) || ctx.Err() != nil {
			break
		}
	}
	return s.unavailable(err)
}

// tx runs fn in a transaction, committed if fn returns nil, else rolled
// back; otherwise as do.
func (s *Store) tx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	began := time.Now()
	err := s.do(ctx, func(querier) error { return pgx.BeginFunc(ctx, s.pool, fn) })
	if o := s.observer.Load(); o != nil && err == nil {
		(*o).Commit(time.Since(began), 1)
	}
	return err
}

// retryable reports whether err means the operation did nothing and may
// simply run again: nothing reached the server (a pooled connection
// found dead), or the server aborted it for a serialization failure or a
// deadlock.
func retryable(err error) bool {
	if pgconn.SafeToRetry(err) {
		return true
	}
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

// unavailable wraps err with store.ErrUnavailable if it says the server
// cannot be reached; other errors are returned as they are.
func (s *Store) unavailable(err error) error {
	if err == nil || errors.Is(err, store.ErrUnavailable) || !isUnavailable(err) {
		return err
	}
	return fmt.Errorf("%w: postgres at %s: %w", store.ErrUnavailable, s.addr, err)
}

// isUnavailable reports whether err is a failure to reach or stay
// connected to the server, as opposed to an answer from it.
func isUnavailable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03": // admin_shutdown, crash_shutdown, cannot_connect_now
			return true
		case "53300": // too_many_connections: retryable like the rest
			return true
		}
		// Class 08: connection exception. Others (authentication, a
		// missing database) are answers, not worth retrying.
		return strings.HasPrefix(pgErr.Code, "08")
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) || pgconn.SafeToRetry(err) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// pgCode returns err's SQLSTATE and constraint, if it is a server error.
func pgCode(err error) (code, constraint string) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code, pgErr.ConstraintName
	}
	return "", ""
}

// SQLSTATEs the store maps to its sentinels.
const (
	uniqueViolation     = "23505"
	foreignKeyViolation = "23503"
)
