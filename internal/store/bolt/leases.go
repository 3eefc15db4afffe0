package bolt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	bbolt "go.etcd.io/bbolt"

	"substrate.dev/ate/internal/codec"
	"substrate.dev/ate/internal/store"
)

// Leases live in memory, not in the file. A bbolt file is open in one
// process at a time (its lock), so no other process can hold, see or
// take over a lease, and every holder of a lease dies with the process:
// what a file kept would only make the next process wait out leases of
// holders that are gone. In memory, taking and giving back a lease —
// two of every workflow's steps, four of a wake-up's eight commits
// before — costs no commit, a renewal never queues behind other writes,
// and expiry is measured on the monotonic clock, so a step of the wall
// clock ends no lease early.
//
// Fencing keeps the store's guarantee: a write checks its lease inside
// its transaction (checkFence), and a lease that exists — another
// holder's that expired, or the holder's own under an older token — is
// taken over between transactions (committer.between), once every write
// queued before it has committed, so a write that passed its check
// under the old lease is committed before the new holder reads anything.
// A key with no lease was given back by its holder after its writes
// returned, so it is taken at once.
//
// Tokens grow across processes: Open reserves a block of them in the
// file and a new block is reserved (one commit) when it is used up.
type leaseTable struct {
	mu sync.Mutex
	m  map[string]store.Lease
	// next is the last token handed out; tokens up to limit are
	// reserved in the file (kLeaseToken).
	next, limit int64
}

// tokenBlock is how many tokens one reservation covers.
const tokenBlock = 1 << 20

// errNoToken: the reserved tokens are used up; reserve more and retry.
var errNoToken = errors.New("lease tokens used up")

// reserveTokens reserves a new block of tokens in tx, above both what
// the file says and limit, and returns the new limit.
func reserveTokens(tx *bbolt.Tx, limit int64) (int64, error) {
	var stored int64
	if v := tx.Bucket(bMeta).Get(kLeaseToken); v != nil {
		if err := codec.Unmarshal(v, &stored); err != nil {
			return 0, fmt.Errorf("decode lease token: %w", err)
		}
	}
	next := max(stored, limit) + tokenBlock
	return next, put(tx.Bucket(bMeta), kLeaseToken, next)
}

// ensureTokens reserves a new block if none is left.
func (s *Store) ensureTokens() error {
	s.leases.mu.Lock()
	left := s.leases.next < s.leases.limit
	limit := s.leases.limit
	s.leases.mu.Unlock()
	if left {
		return nil
	}
	var reserved int64
	err := s.update(func(tx *bbolt.Tx) (err error) {
		reserved, err = reserveTokens(tx, limit)
		return err
	})
	if err != nil {
		return err
	}
	s.leases.mu.Lock()
	s.leases.limit = max(s.leases.limit, reserved)
	s.leases.mu.Unlock()
	return nil
}

// acquire takes key's lease for holder if it is free, expired or
// holder's. Unless between is set, a key that has a lease is not taken:
// wait reports that it must be, between transactions.
func (t *leaseTable) acquire(key, holder string, ttl time.Duration, between bool) (l *store.Lease, wait bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	cur, ok := t.m[key]
	switch {
	case ok && cur.Holder != holder && now.Before(cur.Expiry):
		return nil, false, fmt.Errorf("lease %s held by %s: %w", key, cur.Holder, store.ErrLeaseHeld)
	case ok && !between:
		return nil, true, nil
	case t.next >= t.limit:
		return nil, false, errNoToken
	}
	t.next++
	n := store.Lease{Key: key, Holder: holder, Token: t.next, Expiry: now.Add(ttl)}
	t.m[key] = n
	return published(n), false, nil
}

// published is a copy of l for a caller: its expiry without the
// monotonic reading the table compares by.
func published(l store.Lease) *store.Lease {
	l.Expiry = l.Expiry.Round(0)
	return &l
}

// live returns f's lease if f.Holder holds it with f.Token and it has
// not expired at now; store.ErrFenced otherwise. The caller holds t.mu.
func (t *leaseTable) live(f store.Fence, now time.Time) (store.Lease, error) {
	cur, ok := t.m[f.Key]
	switch {
	case !ok:
		return cur, fmt.Errorf("lease %s of %s (token %d) is gone: %w", f.Key, f.Holder, f.Token, store.ErrFenced)
	case cur.Holder != f.Holder || cur.Token != f.Token:
		return cur, fmt.Errorf("lease %s of %s (token %d) is now %s's (token %d): %w", f.Key, f.Holder, f.Token, cur.Holder, cur.Token, store.ErrFenced)
	case !now.Before(cur.Expiry):
		return cur, fmt.Errorf("lease %s of %s (token %d) expired at %s: %w", f.Key, f.Holder, f.Token, cur.Expiry.Round(0).Format(time.RFC3339Nano), store.ErrFenced)
	}
	return cur, nil
}

// AcquireLease implements store.Store.
func (s *Store) AcquireLease(_ context.Context, key, holder string, ttl time.Duration) (*store.Lease, error) {
	for {
		if err := s.ensureTokens(); err != nil {
			return nil, err
		}
		l, wait, err := s.leases.acquire(key, holder, ttl, false)
		if wait {
			var berr error
			if err = s.writes.between(func() { l, _, berr = s.leases.acquire(key, holder, ttl, true) }); err == nil {
				err = berr
			}
		}
		if !errors.Is(err, errNoToken) {
			return l, err
		}
	}
}

// RenewLease implements store.Store. It never waits for other writes.
func (s *Store) RenewLease(_ context.Context, key, holder string, token int64, ttl time.Duration) (*store.Lease, error) {
	s.leases.mu.Lock()
	defer s.leases.mu.Unlock()
	now := time.Now()
	cur, err := s.leases.live(store.Fence{Key: key, Holder: holder, Token: token}, now)
	if err != nil {
		return nil, err
	}
	cur.Expiry = now.Add(ttl)
	s.leases.m[key] = cur
	return published(cur), nil
}

// ReleaseLease implements store.Store.
func (s *Store) ReleaseLease(_ context.Context, key, holder string) error {
	s.leases.mu.Lock()
	defer s.leases.mu.Unlock()
	if cur, ok := s.leases.m[key]; ok && cur.Holder == holder {
		delete(s.leases.m, key)
	}
	return nil
}

// checkFence fails with store.ErrFenced unless the fence ctx carries, if
// any, names a live lease. It runs inside the write's function, and a
// takeover runs only between transactions, so no takeover falls
// between the check and the commit.
func (s *Store) checkFence(ctx context.Context) error {
	f, ok := store.FenceFrom(ctx)
	if !ok {
		return nil
	}
	s.leases.mu.Lock()
	defer s.leases.mu.Unlock()
	_, err := s.leases.live(f, time.Now())
	return err
}
