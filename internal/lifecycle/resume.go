package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/store"
)

// Resume makes the actor RUNNING: it claims a free worker (waiting for one
// until ctx ends) and restores the actor's latest snapshot, else its
// template's golden snapshot, else cold-boots the image. Concurrent calls
// for one actor queue on its lock and the later ones find it RUNNING, so an
// actor is restored once however many callers race.
//
// Errors: store.ErrNotFound; ErrFailedPrecondition (e.g. DELETING);
// ErrNoCapacity wrapping ctx's error when no worker freed in time;
// ErrResumeFailed when the restore or boot failed — the actor is then
// SUSPENDED or CRASHED at its last snapshot and the worker is free.
func (m *Manager) Resume(ctx context.Context, atespace, name string) (out *store.Actor, err error) {
	err = m.withActor(ctx, atespace, name, func() error {
		out, err = m.resumeLocked(ctx, atespace, name)
		return err
	})
	return out, err
}

func (m *Manager) resumeLocked(ctx context.Context, atespace, name string) (*store.Actor, error) {
	a, err := m.store.GetActor(ctx, atespace, name)
	if err != nil {
		return nil, err
	}
	switch a.State {
	case store.Running:
		return a, nil
	case store.Resuming, store.Suspending:
		if a, err = m.recoverLocked(ctx, a, "interrupted "+string(a.State)+" was rolled back"); err != nil {
			return nil, err
		}
	case store.Suspended, store.Crashed:
	default:
		return nil, fmt.Errorf("%w: actor %s is %s and cannot be resumed", ErrFailedPrecondition, a.Key(), a.State)
	}
	tpl, err := m.store.GetTemplate(ctx, atespace, a.Template)
	if err != nil {
		return nil, fmt.Errorf("actor %s: %w", a.Key(), err)
	}
	snap := a.Snapshot
	if snap == "" && tpl.Phase == store.TemplateReady {
		snap = tpl.GoldenSnapshot
	}
	a, err = m.claim(ctx, a)
	if err != nil {
		return nil, err
	}
	// From here the worker is ours: the node operation runs to the end
	// even if the caller gives up, and every exit frees it on failure.
	nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), nodeOpTimeout)
	defer cancel()
	start := time.Now()
	err = m.node.Start(nctx, node.StartRequest{Worker: a.Worker, ActorUID: a.UID, Actor: a.Key(), Spec: tpl.Spec, Snapshot: snap})
	if err != nil {
		return nil, m.resumeFailed(nctx, a, err)
	}
	running := *a
	running.State, running.Message = store.Running, ""
	running.Resumes++
	out, err := m.update(nctx, &running)
	if err != nil {
		// A late finisher: someone else changed the actor while we
		// restored. Give up without overwriting, and free what we hold.
		_ = m.node.Stop(nctx, a.Worker, a.UID)
		_ = m.store.ReleaseWorker(nctx, a.Worker, a.UID)
		m.workerFreed()
		return nil, fmt.Errorf("%w: actor %s changed during resume: %w", ErrResumeFailed, a.Key(), err)
	}
	m.log.InfoContext(ctx, "actor resumed", "actor", a.Name, "atespace", a.Atespace, "worker", a.Worker,
		"snapshot", snap, "ms", time.Since(start).Milliseconds())
	return out, nil
}

// claim takes a free worker for a, moving it to RESUMING, and waits for one
// to be freed while none is.
func (m *Manager) claim(ctx context.Context, a *store.Actor) (*store.Actor, error) {
	for waiting := false; ; waiting = true {
		freed := m.freedCh()
		ra, _, err := m.store.ClaimWorker(ctx, a)
		if err == nil {
			return ra, nil
		}
		if !errors.Is(err, store.ErrNoFreeWorker) {
			return nil, err
		}
		if !waiting {
			m.log.InfoContext(ctx, "waiting for a free worker", "actor", a.Name, "atespace", a.Atespace)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w for actor %s before the deadline: %w", ErrNoCapacity, a.Key(), ctx.Err())
		case <-freed:
		case <-time.After(claimPoll):
		}
	}
}

// resumeFailed puts the actor back where Resume found it (minus the
// worker) and reports the cause.
func (m *Manager) resumeFailed(ctx context.Context, a *store.Actor, cause error) error {
	back := *a
	back.State, back.Worker = store.Suspended, ""
	back.Message = "resume failed: " + cause.Error()
	if _, err := m.update(ctx, &back); err != nil {
		// Someone else moved the actor; free the worker if still ours.
		_ = m.store.ReleaseWorker(ctx, a.Worker, a.UID)
	}
	m.workerFreed()
	return fmt.Errorf("%w: %w", ErrResumeFailed, cause)
}
