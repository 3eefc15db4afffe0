package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// The installation lease: `ate up` over a shared store (PostgreSQL)
// holds it for as long as it runs, so that no second `ate up` uses the
// database. Each keeps its snapshots in its own data dir, so a second
// installation over the records of the first could restore none of
// them, and its start-up would unregister the first one's workers.
const (
	installationLease = "installation/ate-up"
	// installationTTL is the lease's life; Renew renews it every third
	// of that, so a holder that died frees the database within
	// installationTTL while a live one rides out two failed renewals.
	installationTTL = 15 * time.Second
)

// Installation is a held installation lease (TakeInstallation). Renew
// keeps it; Release gives it up. Renew and Release may run
// concurrently.
type Installation struct {
	st     Store
	holder string
	token  int64
	// every is how often Renew renews: installationTTL/3.
	every time.Duration
}

// TakeInstallation takes st's installation lease for holder (a name
// stable across restarts of one installation — host and data dir — so
// a restarted `ate up` takes its lease back at once) and checks that
// every worker st records is node's: a database holding workers of other
// nodes belongs to `ate apiserver` replicas. Errors, after which nothing
// is held: the lease held by another (wrapping ErrLeaseHeld), a database
// of other nodes' workers, the store's.
func TakeInstallation(ctx context.Context, st Store, holder, node string) (*Installation, error) {
	lease, err := st.AcquireLease(ctx, installationLease, holder, installationTTL)
	if errors.Is(err, ErrLeaseHeld) {
		return nil, fmt.Errorf("another `ate up` uses this database (%w): `ate up` keeps its snapshots in its own data dir, so two cannot share a store; "+
			"run `ate apiserver` replicas over it instead (docs/ha.md)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("take the installation lease: %w", err)
	}
	in := &Installation{st: st, holder: holder, token: lease.Token, every: installationTTL / 3}
	workers, err := st.ListWorkers(ctx)
	if err != nil {
		_ = in.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	for _, w := range workers {
		if w.Node != node {
			_ = in.Release(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("this database holds workers of node %s: it is used by `ate apiserver` replicas, and `ate up` needs a database of its own", w.Node)
		}
	}
	return in, nil
}

// Renew renews the lease every third of its life until ctx ends, each
// attempt bounded by that third, so that one hung call cannot outlast
// the lease. Failures are logged and retried at the next tick. A lease
// the store no longer lets this holder renew (ErrFenced) is taken back
// when nobody else holds it — it merely expired, through a database
// restart or this process paused past its life — and only a lease
// another holder took (ErrLeaseHeld) ends the renewal, logged as an
// error.
func (in *Installation) Renew(ctx context.Context, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tick := time.NewTicker(in.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if lost := in.renewOnce(ctx, log); lost {
			return
		}
	}
}

// renewOnce is one renewal (or, once fenced, one take-back) within
// in.every; lost reports a lease another holder has.
func (in *Installation) renewOnce(ctx context.Context, log *slog.Logger) (lost bool) {
	ctx, cancel := context.WithTimeout(ctx, in.every)
	defer cancel()
	_, err := in.st.RenewLease(ctx, installationLease, in.holder, in.token, installationTTL)
	if errors.Is(err, ErrFenced) {
		var lease *Lease
		if lease, err = in.st.AcquireLease(ctx, installationLease, in.holder, installationTTL); err == nil {
			log.Warn("installation lease had expired; taken back", "holder", in.holder)
			in.token = lease.Token
		}
	}
	switch {
	case err == nil, ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded):
	case errors.Is(err, ErrLeaseHeld):
		log.Error("installation lease lost: another `ate up` has taken this database over", "err", err)
		return true
	default:
		log.Warn("installation lease not renewed; retrying", "err", err)
	}
	return false
}

// Release gives the lease up; a lease already lost is left to its new
// holder.
func (in *Installation) Release(ctx context.Context) error {
	return in.st.ReleaseLease(ctx, installationLease, in.holder)
}
