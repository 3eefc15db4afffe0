package lifecycle

import (
	"context"
	"fmt"
	"strings"

	"substrate.dev/ate/internal/store"
)

// Suspend checkpoints a RUNNING actor to the snapshot store, frees its
// worker and leaves it SUSPENDED with the new snapshot. The actor's
// pointer moves only after the snapshot is committed, and the previous
// snapshot is deleted only after that. Suspending a SUSPENDED actor is a
// no-op.
//
// Errors: store.ErrNotFound; ErrFailedPrecondition for other states;
// ErrSuspendFailed when the checkpoint failed — the actor is then CRASHED
// at its previous snapshot and its worker is free.
func (m *Manager) Suspend(ctx context.Context, atespace, name string) (out *store.Actor, err error) {
	err = m.withActor(ctx, atespace, name, func() error {
		out, err = m.suspendLocked(ctx, atespace, name)
		return err
	})
	return out, err
}

func (m *Manager) suspendLocked(ctx context.Context, atespace, name string) (*store.Actor, error) {
	a, err := m.store.GetActor(ctx, atespace, name)
	if err != nil {
		return nil, err
	}
	switch a.State {
	case store.Suspended:
		return a, nil
	case store.Running:
	default:
		return nil, fmt.Errorf("%w: actor %s is %s; only a RUNNING actor can be suspended", ErrFailedPrecondition, a.Key(), a.State)
	}
	s := *a
	s.State = store.Suspending
	if a, err = m.update(ctx, &s); err != nil {
		return nil, err
	}
	ref, err := m.node.Checkpoint(context.WithoutCancel(ctx), a.Worker, a.UID)
	if err != nil {
		// The sandbox may be gone; the last snapshot is still good.
		crashed := *a
		crashed.State, crashed.Worker, crashed.Message = store.Crashed, "", "suspend failed: "+err.Error()
		_, uerr := m.update(ctx, &crashed)
		m.workerFreed()
		if uerr != nil {
			return nil, fmt.Errorf("%w: %w (and recording it: %w)", ErrSuspendFailed, err, uerr)
		}
		return nil, fmt.Errorf("%w: actor %s: %w", ErrSuspendFailed, a.Key(), err)
	}
	done := *a
	done.State, done.Worker, done.Snapshot, done.Message = store.Suspended, "", ref, ""
	out, err := m.update(ctx, &done)
	m.workerFreed()
	if err != nil {
		// Lost the race: the new snapshot is referenced by nobody.
		_ = m.snaps.Delete(ref)
		return nil, err
	}
	m.deleteOld(ctx, a, a.Snapshot)
	m.log.InfoContext(ctx, "actor suspended", "actor", a.Name, "atespace", a.Atespace, "snapshot", ref)
	return out, nil
}

// deleteOld removes the actor's previous snapshot; the golden snapshot
// belongs to its template and is never removed here.
func (m *Manager) deleteOld(ctx context.Context, a *store.Actor, ref string) {
	if ref == "" || !strings.HasPrefix(ref, a.UID+"/") {
		return
	}
	if err := m.snaps.Delete(ref); err != nil {
		m.log.WarnContext(ctx, "delete old snapshot", "actor", a.Key(), "snapshot", ref, "err", err)
	}
}

// Delete removes a SUSPENDED or CRASHED actor and its snapshots. Other
// states fail with ErrFailedPrecondition, telling the user to suspend first.
func (m *Manager) Delete(ctx context.Context, atespace, name string) error {
	return m.withActor(ctx, atespace, name, func() error {
		a, err := m.store.GetActor(ctx, atespace, name)
		if err != nil {
			return err
		}
		if a.State != store.Suspended && a.State != store.Crashed {
			return fmt.Errorf("%w: actor %s is %s; suspend it first (ate suspend actor %s -n %s)",
				ErrFailedPrecondition, a.Key(), a.State, a.Name, a.Atespace)
		}
		if err := m.store.DeleteActor(ctx, a); err != nil {
			return err
		}
		if err := m.snaps.DeleteOwner(a.UID); err != nil {
			m.log.WarnContext(ctx, "delete snapshots", "actor", a.Key(), "err", err)
		}
		return nil
	})
}

// SuspendAll suspends every actor holding one of this store's workers, so
// that stopping the node loses no memory. It tries each actor once and
// returns the first error after trying all.
func (m *Manager) SuspendAll(ctx context.Context) error {
	workers, err := m.store.ListWorkers(ctx)
	if err != nil {
		return err
	}
	var first error
	for _, w := range workers {
		if w.Free() {
			continue
		}
		atespace, name, _ := cutKey(w.Actor)
		if _, err := m.Suspend(ctx, atespace, name); err != nil && first == nil {
			first = fmt.Errorf("suspend %s: %w", w.Actor, err)
		}
	}
	return first
}
