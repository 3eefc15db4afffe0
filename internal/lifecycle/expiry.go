package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"substrate.dev/ate/internal/clock"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
)

// Expiry tuning (docs/actors.md, Expiry).
const (
	// DefaultExpiryInterval is how often the expiry sweep runs unless
	// configured: a TTL is days in practice, so a minute late is nothing,
	// and a pass reads at most expiryScan actors.
	DefaultExpiryInterval = time.Minute
	// MinTTL is the shortest ttl.deleteAfterIdle accepted.
	MinTTL = time.Second
	// expiryScan bounds the actors one pass reads; the next pass goes on
	// from where it stopped, so a store of a million actors is covered in
	// a thousand passes without any one pass taking long.
	expiryScan = 1000
	// expiryDeletes bounds the deletions of one pass.
	expiryDeletes = 100
	// expiryLockWait bounds how long the sweep waits for an actor's
	// lease: one held elsewhere is in use, so it is skipped this pass.
	expiryLockWait = 2 * time.Second
)

// ParseTTL parses a template's ttl.deleteAfterIdle: a Go duration
// ("36h", "90m") or whole days ("14d"). Empty means never (0, nil).
// Errors: malformed, or shorter than MinTTL.
func ParseTTL(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 32)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("ttl.deleteAfterIdle %q: want a Go duration (\"36h\") or whole days (\"14d\")", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("ttl.deleteAfterIdle %q: want a Go duration (\"36h\") or whole days (\"14d\"): %w", s, err)
		}
	}
	if d < MinTTL {
		return 0, fmt.Errorf("ttl.deleteAfterIdle %q: must be at least %s (or absent: never)", s, MinTTL)
	}
	return d, nil
}

// IdleSince is when the actor was last used: the latest of its last
// activity (the router's traffic), its last state change (a resume,
// suspend or crash) and its creation (a record without a state time, so
// a new actor is never expired at once).
func IdleSince(a *store.Actor) time.Time {
	t := a.StateTime
	for _, u := range []time.Time{a.LastActivity, a.CreateTime} {
		if u.After(t) {
			t = u
		}
	}
	return t
}

// ExpiredFor reports how long a has been unused and whether that makes it
// expired under ttl at now: only SUSPENDED and CRASHED actors expire
// (RUNNING ones are in use; PAUSED ones hold their latest state on one
// node's disk, for a quick return on it, which the pause asked to keep),
// and a ttl of 0 never expires.
func ExpiredFor(a *store.Actor, ttl time.Duration, now time.Time) (idle time.Duration, expired bool) {
	idle = now.Sub(IdleSince(a))
	if ttl <= 0 || a.Worker != "" || (a.State != store.Suspended && a.State != store.Crashed) {
		return idle, false
	}
	return idle, idle >= ttl
}

// TTLs reads and remembers templates' TTLs for one pass over actors (a
// dry-run listing, a sweep): templates are immutable, so a cached TTL
// never goes stale, but a pass reads each template once. Not safe for
// concurrent use.
type TTLs struct {
	store store.Store
	ttl   map[string]time.Duration // "<atespace>/<template>" → ttl (0: none)
}

// NewTTLs returns an empty TTLs over s.
func NewTTLs(s store.Store) *TTLs { return &TTLs{store: s, ttl: map[string]time.Duration{}} }

// Of returns a's template's ttl (0: never). A template that is gone (a
// moved actor's old one) or has an unparsable TTL counts as none.
func (t *TTLs) Of(ctx context.Context, a *store.Actor) (time.Duration, error) {
	k := a.Atespace + "/" + a.Template
	if d, ok := t.ttl[k]; ok {
		return d, nil
	}
	tpl, err := t.store.GetTemplate(ctx, a.Atespace, a.Template)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("template of %s: %w", a.Key(), err)
	}
	d, err := ParseTTL(tpl.Spec.GetTtl().GetDeleteAfterIdle())
	if err != nil {
		d = 0 // validated at creation; a bad stored value never deletes
	}
	t.ttl[k] = d
	return d, nil
}

// Expired is ExpiredFor with a's template's ttl.
func (t *TTLs) Expired(ctx context.Context, a *store.Actor, now time.Time) (idle time.Duration, expired bool, err error) {
	ttl, err := t.Of(ctx, a)
	if err != nil {
		return 0, false, err
	}
	idle, expired = ExpiredFor(a, ttl, now)
	return idle, expired, nil
}

// expiryCursor is where the next sweep pass goes on from.
type expiryCursor struct {
	mu    sync.Mutex // guards token; passes do not overlap in one process
	token string
}

// SweepExpired runs one bounded pass of the expiry sweep: it reads up to
// expiryScan actors from where the previous pass stopped (wrapping to the
// start at the end) and deletes, with their snapshots, up to
// expiryDeletes of those expired at now (ExpiredFor), logging "actor
// expired" for each. Every deletion holds the actor's lock and lease and
// checks again on the fresh record, and the delete is compare-and-set on
// its version: a resume or a request that races the sweep either wins
// (the actor stays) or finds the actor gone, never half of it. An actor
// busy elsewhere is skipped until a later pass. Several API server
// replicas may sweep the same store at once.
// It returns the number deleted; errors are the store's list errors (a
// failed deletion is logged and skipped).
func (m *Manager) SweepExpired(ctx context.Context, now time.Time) (int, error) {
	m.expiry.mu.Lock()
	defer m.expiry.mu.Unlock()
	ttls := NewTTLs(m.store)
	deleted, scanned := 0, 0
	token := m.expiry.token
	for scanned < expiryScan && deleted < expiryDeletes {
		page, next, err := m.store.ListActors(ctx, "", min(500, expiryScan-scanned), token)
		if err != nil {
			return deleted, fmt.Errorf("expiry sweep: list actors: %w", err)
		}
		scanned += len(page)
		for _, a := range page {
			if deleted == expiryDeletes {
				// Page tokens are the backends' own, so the next pass
				// reads this page again; those deleted are gone from it.
				next = token
				break
			}
			if _, expired, err := ttls.Expired(ctx, a, now); err != nil || !expired {
				continue
			}
			ok, err := m.expire(ctx, a.Key(), ttls, now)
			if err != nil && ctx.Err() == nil {
				m.log.WarnContext(ctx, "expire actor", "actor", a.Key(), "err", err)
			}
			if ok {
				deleted++
			}
		}
		if deleted == expiryDeletes && next == token {
			break
		}
		token = next
		if next == "" {
			break
		}
	}
	m.expiry.token = token
	return deleted, nil
}

// expire deletes the actor if it is still expired under its lock and
// lease; ok reports whether it did.
func (m *Manager) expire(ctx context.Context, key names.ActorKey, ttls *TTLs, now time.Time) (ok bool, err error) {
	unlock, locked := m.locks.tryLock(key)
	if !locked {
		return false, nil // a workflow runs: the actor is in use
	}
	defer unlock()
	lctx, cancel := context.WithTimeout(ctx, expiryLockWait)
	defer cancel()
	err = m.leased(lctx, key, func(lctx context.Context) error {
		// The deletion itself runs to its end once started.
		ctx := context.WithoutCancel(lctx)
		a, err := m.leasedActor(ctx, key)
		if errors.Is(err, store.ErrNotFound) {
			return nil // another replica's sweep was first
		}
		if err != nil {
			return err
		}
		idle, expired, err := ttls.Expired(ctx, a, now)
		if err != nil || !expired {
			return err
		}
		// Compare-and-set on the version just read: a request's activity
		// or a resume recorded since makes this a conflict, and the
		// actor stays.
		if err := m.store.DeleteActor(ctx, a); err != nil {
			if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
				return nil
			}
			return err
		}
		m.recordDeleted(a, fmt.Sprintf("expired: idle for %s, past its template's ttl", idle.Round(time.Second)))
		ok = true
		m.metrics.Expired()
		if err := m.snaps.DeleteOwner(ctx, a.UID); err != nil {
			m.log.WarnContext(ctx, "delete expired actor's snapshots", "actor", a.Key(), "err", err)
		}
		m.forgetActor(a.UID)
		m.log.InfoContext(ctx, "actor expired", "actor", a.Key(), "template", a.Template,
			"idleFor", idle.Round(time.Millisecond).String(), "state", a.State, "uid", a.UID)
		return nil
	})
	if errors.Is(err, context.DeadlineExceeded) && lctx.Err() != nil && ctx.Err() == nil {
		return false, nil // the lease is held elsewhere: in use
	}
	return ok, err
}

// RunExpiry runs SweepExpired every interval (DefaultExpiryInterval when
// ≤ 0) until ctx ends, and returns nil then. A failed pass is logged; the
// next one tries again.
func (m *Manager) RunExpiry(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		interval = DefaultExpiryInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if n, err := m.SweepExpired(ctx, clock.Now()); err != nil && ctx.Err() == nil {
			m.log.WarnContext(ctx, "expiry sweep", "err", err)
		} else if n > 0 {
			m.log.InfoContext(ctx, "expiry sweep done", "deleted", n)
		}
	}
}
