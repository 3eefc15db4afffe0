package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
)

// Leases are computed and compared by the database clock
// (clock_timestamp(): the time of the statement, not of its
// transaction's start), so the replicas' clocks play no part. A TTL is
// rounded up to whole microseconds, the database's resolution.

// Acquiring and releasing a lease go to the async pool: committed
// without waiting for the WAL flush, which a crash may undo safely
// (Store.async). A renewal waits for it: it is also the check a workflow
// makes before acting outside the store (stopping a sandbox), and it is
// off the wake-up's path.

// micros is ttl in microseconds, rounded up.
func micros(ttl time.Duration) int64 {
	return int64((ttl + time.Microsecond - 1) / time.Microsecond)
}

// AcquireLease implements store.Store: one statement that takes the row
// if it is absent, expired or holder's, with a token from the
// lease_tokens sequence.
func (s *Store) AcquireLease(ctx context.Context, key, holder string, ttl time.Duration) (out *store.Lease, err error) {
	return s.acquireLease(ctx, key, holder, ttl, false)
}

// TakeOverLease implements store.Store: AcquireLease's statement, which
// then also takes the row from a holder whose heartbeat row
// (store.HolderKey) has expired.
func (s *Store) TakeOverLease(ctx context.Context, key, holder string, ttl time.Duration) (out *store.Lease, err error) {
	return s.acquireLease(ctx, key, holder, ttl, true)
}

// acquireLease takes key's lease.
func (s *Store) acquireLease(ctx context.Context, key, holder string, ttl time.Duration, takeOver bool) (out *store.Lease, err error) {
	err = s.doAsync(ctx, func(q querier) error {
		var r acquiredRow
		err := r.scan(q.QueryRow(ctx, acquireQuery, acquireArgs(key, holder, ttl, takeOver)...))
		out, err = r.lease(ctx, q, err, key, holder)
		return err
	})
	return out, err
}

// acquireQuery takes a lease (arguments: acquireArgs). A row taken over
// gets its token from the sequence under the row's lock (DO UPDATE), not
// from VALUES, which is evaluated before the lock is waited for: two
// takeovers in a row then hold tokens in the order they held the lease,
// which nodes rely on (docs/ha.md, Node calls are fenced). The third
// column is the holder as the statement began (TakenFrom): the row taken
// is that one unless a takeover raced this one, and TakenFrom is only a
// hint to fence the old holder's calls.
const acquireQuery = `
	WITH prev AS (SELECT holder FROM leases WHERE key = $1)
	INSERT INTO leases AS l (key, holder, token, expiry)
	VALUES ($1, $2, nextval('lease_tokens'), clock_timestamp() + $3 * interval '1 microsecond')
	ON CONFLICT (key) DO UPDATE SET holder = excluded.holder, token = nextval('lease_tokens'), expiry = excluded.expiry
		WHERE l.holder = excluded.holder OR l.expiry <= clock_timestamp()
			OR ($4 AND EXISTS (SELECT 1 FROM leases h
				WHERE h.key = $5::text || l.holder AND h.holder = l.holder AND h.expiry <= clock_timestamp()))
	RETURNING token, expiry, (SELECT holder FROM prev)`

func acquireArgs(key, holder string, ttl time.Duration, takeOver bool) []any {
	return []any{key, holder, micros(ttl), takeOver, store.HolderKey("")}
}

// acquiredRow is acquireQuery's row.
type acquiredRow struct {
	token  int64
	expiry time.Time
	prev   *string
}

func (r *acquiredRow) scan(row pgx.Row) error { return row.Scan(&r.token, &r.expiry, &r.prev) }

// lease is what acquireQuery did, given scan's error: the lease, or
// store.ErrLeaseHeld naming its holder (read with q: the connection must
// be free again).
func (r *acquiredRow) lease(ctx context.Context, q querier, scanErr error, key, holder string) (*store.Lease, error) {
	if errors.Is(scanErr, pgx.ErrNoRows) {
		var other string
		if err := q.QueryRow(ctx, `SELECT holder FROM leases WHERE key = $1`, key).Scan(&other); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("lease %s held by %s: %w", key, other, store.ErrLeaseHeld)
	}
	if scanErr != nil {
		return nil, scanErr
	}
	l := &store.Lease{Key: key, Holder: holder, Token: r.token, Expiry: r.expiry.UTC()}
	if r.prev != nil && *r.prev != holder {
		l.TakenFrom = *r.prev
	}
	return l, nil
}

// LeaseActor implements store.ActorLeaser: acquireQuery and the read of
// the actor with its template go in one batch, on the async pool as
// acquireLease. The read is a statement of its own, not part of
// acquireQuery, because a statement reads from the snapshot it began
// with: an acquisition that waited for the lease row (a takeover waits
// for a fenced write of the old holder, which locks it FOR SHARE until
// it commits) would read the record as it was before that write. READ
// COMMITTED gives the next statement a snapshot taken after it.
func (s *Store) LeaseActor(ctx context.Context, lease string, key names.ActorKey, holder string, ttl time.Duration, takeOver bool) (l *store.Lease, a *store.Actor, t *store.Template, err error) {
	err = s.doAsync(ctx, func(q querier) error {
		l, a, t = nil, nil, nil
		b := &pgx.Batch{}
		b.Queue(acquireQuery, acquireArgs(lease, holder, ttl, takeOver)...)
		// Only once the lease is this holder's: a workflow polling a
		// lease another holds reads nothing it would throw away.
		b.Queue(`SELECT a.record, t.key, t.spec, t.record FROM actors a
			LEFT JOIN templates t ON t.atespace = a.atespace AND t.name = a.template
			WHERE a.key = $1 AND EXISTS (SELECT 1 FROM leases WHERE key = $2 AND holder = $3)`, key.String(), lease, holder)
		br := q.SendBatch(ctx, b)
		var r acquiredRow
		var rec, tspec, trec []byte
		var tkey *string
		lerr := r.scan(br.QueryRow())
		rerr := br.QueryRow().Scan(&rec, &tkey, &tspec, &trec)
		if err := br.Close(); err != nil {
			return err
		}
		got, err := r.lease(ctx, q, lerr, lease, holder)
		if err != nil {
			return err
		}
		l = got
		// The lease is held from here. No row (no such actor), or a
		// record that does not decode, leaves the record to the
		// caller's own read and its error. A read the server failed
		// aborted the batch's implicit transaction, the acquisition
		// with it, and Close said so above.
		if rerr == nil {
			a, t = leasedRecords(key, rec, tkey, tspec, trec)
		}
		return nil
	})
	return l, a, t, err
}

// leasedRecords decodes LeaseActor's read; what does not decode is left
// nil.
func leasedRecords(key names.ActorKey, rec []byte, tkey *string, tspec, trec []byte) (*store.Actor, *store.Template) {
	a, err := decode[store.Actor]("actor "+key.String(), rec)
	if err != nil || tkey == nil {
		return a, nil
	}
	t, err := scanTemplate(*tkey, tspec, trec)
	if err != nil {
		return a, nil
	}
	return a, t
}

// RenewLease implements store.Store, durably (above).
func (s *Store) RenewLease(ctx context.Context, key, holder string, token int64, ttl time.Duration) (out *store.Lease, err error) {
	err = s.do(ctx, func(q querier) error {
		l := &store.Lease{Key: key, Holder: holder, Token: token}
		err := q.QueryRow(ctx, `
			UPDATE leases SET expiry = clock_timestamp() + $4 * interval '1 microsecond'
			WHERE key = $1 AND holder = $2 AND token = $3 AND expiry > clock_timestamp()
			RETURNING expiry`, key, holder, token, micros(ttl)).Scan(&l.Expiry)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("lease %s of %s (token %d) expired or was taken over: %w", key, holder, token, store.ErrFenced)
		}
		if err != nil {
			return err
		}
		l.Expiry = l.Expiry.UTC()
		out = l
		return nil
	})
	return out, err
}

// ReleaseLease implements store.Store.
func (s *Store) ReleaseLease(ctx context.Context, key, holder string) error {
	return s.doAsync(ctx, func(q querier) error {
		_, err := q.Exec(ctx, `DELETE FROM leases WHERE key = $1 AND holder = $2`, key, holder)
		return err
	})
}

// checkFence fails with store.ErrFenced unless the fence ctx carries, if
// any, names a live lease. It runs first in the writing transaction and
// locks the lease row FOR SHARE, so no takeover (AcquireLease updates
// the row) can commit until the write has: the check holds until commit,
// not just at the moment it ran. A lease row changed by a transaction
// committed while this one waited is re-read and re-checked (READ
// COMMITTED's re-check of locked rows).
func checkFence(ctx context.Context, tx pgx.Tx) error {
	f, ok := store.FenceFrom(ctx)
	if !ok {
		return nil
	}
	return fenceResult(f, tx.QueryRow(ctx, fenceQuery, f.Key, f.Holder, f.Token))
}

// fenceQuery is checkFence's statement; its arguments are the fence's
// key, holder and token.
const fenceQuery = `SELECT 1 FROM leases
	WHERE key = $1 AND holder = $2 AND token = $3 AND expiry > clock_timestamp() FOR SHARE`

// fenceResult reads fenceQuery's row: store.ErrFenced when there is none.
func fenceResult(f store.Fence, row pgx.Row) error {
	var one int
	err := row.Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("lease %s of %s (token %d) expired or was taken over: %w", f.Key, f.Holder, f.Token, store.ErrFenced)
	}
	return err
}
