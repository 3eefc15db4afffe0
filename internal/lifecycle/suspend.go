package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"

	atev1 "substrate.dev/ate/api/ate/v1"

	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/clock"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/tracing"
)

// Suspend checkpoints the actor to the durable snapshot store and leaves
// it SUSPENDED: a RUNNING actor is drained and checkpointed (scope from
// its template's snapshotPolicy.onSuspend) and its worker freed; a PAUSED
// actor's local checkpoint is uploaded. The pointer moves only after the
// snapshot is committed, and the previous snapshot is deleted only after
// that. Suspending a SUSPENDED actor is a no-op.
//
// Errors: store.ErrNotFound; ErrFailedPrecondition for other states;
// ErrSuspendFailed when the checkpoint failed — the actor is then CRASHED
// at its previous snapshot and its worker is free.
func (m *Manager) Suspend(ctx context.Context, key names.ActorKey) (*store.Actor, error) {
	return m.PutAway(ctx, key, checkpoint.Suspend, Why{Reason: store.ReasonRequested})
}

// Pause checkpoints a RUNNING actor to its node's disk (scope from
// snapshotPolicy.onPause) and frees its worker; the next resume prefers
// that node. Pausing a PAUSED actor is a no-op.
func (m *Manager) Pause(ctx context.Context, key names.ActorKey) (*store.Actor, error) {
	return m.PutAway(ctx, key, checkpoint.Pause, Why{Reason: store.ReasonRequested})
}

// Why is why an actor is suspended or paused, recorded on it.
type Why struct {
	Reason store.CheckpointReason
	// EvictedFor is the actor an eviction makes room for.
	EvictedFor names.ActorKey
	// OnWorker, when set, makes PutAway act only if the actor is still
	// the incarnation UID on that worker, checked under the actor's lock
	// (ErrFailedPrecondition otherwise): a self-service request names
	// the worker it came through, and must not reach the actor after it
	// moved, nor whoever holds the worker now.
	OnWorker, UID string
}

// AnotherAtespaceActor stands for an actor's name in what is shown to a
// tenant of another atespace, who may not learn it.
const AnotherAtespaceActor = "an actor of another atespace"

// message is the message, for a checkpoint for w, of an actor of
// atespace; idleAfter is the template's idle.after. The actor an
// eviction made room for is named only when it is of the same atespace:
// the message is the evicted actor's tenant's to read (the record's
// EvictedFor names it, for callers who may see it: apiserver).
func (w Why) message(verb, idleAfter, atespace string) string {
	switch w.Reason {
	case store.ReasonIdle:
		return fmt.Sprintf("%s after no traffic for %s (idle.after)", verb, idleAfter)
	case store.ReasonEvicted:
		forActor := AnotherAtespaceActor
		if w.EvictedFor.Atespace == atespace {
			forActor = w.EvictedFor.String()
		}
		return fmt.Sprintf("%s to make room for %s (evicted: least recently used idle actor)", verb, forActor)
	case store.ReasonSelfRequested:
		return verb + " at the actor's own request"
	default:
		return verb + " by request"
	}
}

// PutAway runs Suspend or Pause, as action says, recording why on the
// actor (Reason, EvictedFor, Message). Same errors as those.
func (m *Manager) PutAway(ctx context.Context, key names.ActorKey, action checkpoint.Action, why Why) (out *store.Actor, err error) {
	paused := action == checkpoint.Pause
	target, from := store.Suspended, "a RUNNING or PAUSED"
	if paused {
		target, from = store.Paused, "a RUNNING"
	}
	err = m.withActor(ctx, key, func(ctx context.Context) error {
		a, err := m.getSettled(ctx, key)
		if err != nil {
			return err
		}
		if why.OnWorker != "" && (a.Worker != why.OnWorker || a.UID != why.UID) {
			return fmt.Errorf("%w: actor %s (uid %s) is not on worker %s any more; the request came through that worker", ErrFailedPrecondition, key, why.UID, why.OnWorker)
		}
		var busy error
		if a.State == store.Running && why.Reason == store.ReasonIdle {
			busy = m.busy(ctx, a)
		}
		switch {
		case a.State == target:
			out = a
		case busy != nil:
			err = busy
		case a.State == store.Running:
			out, err = m.checkpointLocked(ctx, a, action, why)
		case a.State == store.Paused && !paused:
			out, err = m.uploadLocked(ctx, a, why)
		default:
			err = fmt.Errorf("%w: actor %s is %s; only %s actor can be %s", ErrFailedPrecondition, a.Key(), a.State, from, action.Done())
		}
		return err
	})
	return out, err
}

// busy returns ErrFailedPrecondition when a's worker tunnel saw traffic
// within the template's idle.after or has a request open. A router
// decides idleness from the traffic it proxied, but with several routers
// an actor busy through one looks idle to another; every router's
// traffic crosses the worker's tunnel, so the final word is the tunnel's
// (nodes report it in their heartbeats, so it is at most one heartbeat
// interval old).
func (m *Manager) busy(ctx context.Context, a *store.Actor) error {
	n, ok := m.nodes.ForWorker(a.Worker)
	if !ok {
		return nil
	}
	act, ok := n.WorkerActivity(a.Worker)
	if !ok || act.ActorUID != a.UID {
		return nil
	}
	var spec *atev1.ActorTemplateSpec // nil: the defaults
	if tpl, err := m.leasedTemplate(ctx, a); err == nil {
		spec = tpl.Spec
	}
	idleAfter := spec.GetIdle().GetAfter()
	after, err := time.ParseDuration(idleAfter)
	if err != nil {
		return nil // no idle policy: the caller's word stands
	}
	// With streams.idle: ignore, open listening streams do not count.
	if open := streamPolicy(spec).Busy(act.InFlight, act.Listeners); open > 0 {
		return fmt.Errorf("%w: actor %s is not idle: %d requests open on its worker (through another router)", ErrFailedPrecondition, a.Key(), open)
	}
	if since := clock.Since(act.Last); since < after {
		return fmt.Errorf("%w: actor %s is not idle: its worker served traffic %s ago, within idle.after %s (through another router)", ErrFailedPrecondition, a.Key(), since.Round(time.Millisecond), idleAfter)
	}
	return nil
}

// checkpointOptionsFor returns the checkpoint options for action on a,
// from its template (the defaults if the template cannot be read), and
// the template's idle.after.
func (m *Manager) checkpointOptionsFor(ctx context.Context, a *store.Actor, action checkpoint.Action) (nodeapi.CheckpointOptions, string) {
	var spec *atev1.ActorTemplateSpec // nil: the defaults
	if tpl, err := m.leasedTemplate(ctx, a); err == nil {
		spec = tpl.Spec
	}
	return checkpointOptions(spec, action), spec.GetIdle().GetAfter()
}

// checkpointOptions returns the checkpoint options spec asks for on
// action: its snapshotPolicy's scope for it (Full when unset or, since
// the API validated it, unreadable) and its drain grace.
func checkpointOptions(spec *atev1.ActorTemplateSpec, action checkpoint.Action) nodeapi.CheckpointOptions {
	paused := action == checkpoint.Pause
	field := spec.GetSnapshotPolicy().GetOnSuspend()
	if paused {
		field = spec.GetSnapshotPolicy().GetOnPause()
	}
	scope, _ := snapshot.ParseScope(field)
	return nodeapi.CheckpointOptions{Paused: paused, Scope: scope,
		Grace: time.Duration(spec.GetDrainGraceSeconds()) * time.Second}
}

// checkpointLocked runs RUNNING → SUSPENDING|PAUSING → SUSPENDED|PAUSED.
func (m *Manager) checkpointLocked(ctx context.Context, a *store.Actor, action checkpoint.Action, why Why) (_ *store.Actor, err error) {
	began := time.Now()
	ctx, span := tracing.Span(ctx, "lifecycle."+action.String(), attribute.String("ate.actor", a.Key().String()))
	defer func() {
		m.metrics.Checkpoint(action.String(), string(why.Reason), err)
		m.metrics.CheckpointDuration(action.String(), time.Since(began), err)
		tracing.End(span, err)
	}()
	paused := action == checkpoint.Pause
	if _, err := m.nodeOf(a.Worker); err != nil && !m.nodes.Lost(a.Worker) {
		// Not heard here and not lost (another replica may hear it):
		// nothing is asked of it, and the actor stays RUNNING.
		return nil, fmt.Errorf("actor %s: %w", a.Key(), err)
	}
	opts, idleAfter := m.checkpointOptionsFor(ctx, a, action)
	// Snapshot ids carry the API server's clock (nodeapi.CheckpointOptions.ID).
	opts.ID = m.newSnapshotID()
	ing := *a
	ing.State = store.Suspending
	if paused {
		ing.State = store.Pausing
	}
	// For a pause, the id of the checkpoint on the node's disk: a workflow
	// that finds the actor PAUSING asks the node for it again under this
	// id and adopts what the node committed (finishInterrupted).
	ing.PendingSnapshot = a.UID + "/" + opts.ID
	a, err = m.update(ctx, a, &ing)
	if err != nil {
		return nil, err
	}
	on, err := m.nodeOf(a.Worker)
	ref := ""
	if err == nil {
		ref, err = on.Checkpoint(forNode(context.WithoutCancel(ctx), a), a.Worker, a.UID, opts)
	}
	if err == nil && !paused {
		ref, err = reportedRef(ref, a.UID)
	}
	if errors.Is(err, nodeapi.ErrFenced) {
		// A newer workflow has acted on the actor at its node: this
		// one's lease was taken over, and the record is the new
		// holder's to write.
		return nil, fmt.Errorf("actor %s: %w", a.Key(), err)
	}
	if err != nil && m.mayStillRun(a.Worker, err) {
		// The sandbox may still run, and the checkpoint may yet finish
		// there: the actor stays SUSPENDING (PAUSING). The next workflow
		// on it stops the sandbox and adopts a committed snapshot once
		// the node answers, or finds it CRASHED once the node is
		// declared lost.
		return nil, fmt.Errorf("%w: actor %s: %w", ErrNodeUnavailable, a.Key(), err)
	}
	if err != nil {
		// The sandbox may be gone; the last snapshot is still good.
		crashed := *a
		crashed.State, crashed.Worker, crashed.Message, crashed.PendingSnapshot = store.Crashed, "", "checkpoint failed: "+err.Error(), ""
		_, uerr := m.update(ctx, a, &crashed)
		m.workerFreed()
		if uerr != nil {
			return nil, fmt.Errorf("%w: %w (and recording it: %w)", ErrSuspendFailed, err, uerr)
		}
		return nil, fmt.Errorf("%w: actor %s: %w", ErrSuspendFailed, a.Key(), err)
	}
	out, err := m.recordCheckpoint(ctx, a, on, ref, paused, func(done *store.Actor) {
		done.Message = why.message(action.Done(), idleAfter, a.Atespace)
		done.Reason, done.EvictedFor = why.Reason, why.EvictedFor
	})
	if err != nil {
		return nil, err
	}
	m.log.InfoContext(ctx, "actor checkpointed", "actor", a.Key(), "state", out.State, "snapshot", ref, "scope", opts.Scope)
	return out, nil
}

// recordCheckpoint records a (SUSPENDING or PAUSING on its worker) as
// checkpointed by node on to ref, with describe filling in why, frees
// its worker and, for a suspend, deletes its previous snapshot. A write
// refused for a store outage or a lost lease leaves the suspend pending
// for the next workflow (adoptPending); one refused otherwise drops the
// new snapshot, which nobody references.
func (m *Manager) recordCheckpoint(ctx context.Context, a *store.Actor, on nodeapi.Node, ref string, paused bool, describe func(done *store.Actor)) (*store.Actor, error) {
	done := *a
	done.Worker, done.PendingSnapshot = "", ""
	describe(&done)
	if paused {
		done.State, done.PausedSnapshot, done.Node = store.Paused, ref, on.Name()
	} else {
		done.State, done.Snapshot = store.Suspended, ref
	}
	out, err := m.update(ctx, a, &done)
	m.workerFreed()
	if err != nil && (errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrFenced)) {
		// The record still names the checkpoint as pending: whichever
		// workflow takes the actor next adopts it (adoptPending, or for
		// a pause finishInterrupted), and may have already: deleting it
		// here could take the only copy from under that one's record.
		m.log.WarnContext(ctx, "checkpoint not recorded; the next workflow on the actor completes it from its checkpoint",
			"actor", a.Key(), "state", done.State, "snapshot", ref, "err", err)
		return nil, err
	}
	if err != nil {
		// Lost the race: the new snapshot is referenced by nobody.
		if paused {
			_ = on.DeletePaused(ref)
		} else {
			m.dropSnapshot(ref)
		}
		return nil, err
	}
	if !paused {
		m.deleteOld(ctx, a, a.Snapshot)
	}
	return out, nil
}

// uploadLocked runs PAUSED → SUSPENDING → SUSPENDED by uploading the
// node's paused checkpoint to the durable snapshot store.
func (m *Manager) uploadLocked(ctx context.Context, a *store.Actor, why Why) (_ *store.Actor, err error) {
	began := time.Now()
	ctx, span := tracing.Span(ctx, "lifecycle.upload", attribute.String("ate.actor", a.Key().String()))
	defer func() {
		m.metrics.Checkpoint(checkpoint.Suspend.String(), string(why.Reason), err)
		m.metrics.CheckpointDuration(checkpoint.Suspend.String(), time.Since(began), err)
		tracing.End(span, err)
	}()
	opts, idleAfter := m.checkpointOptionsFor(ctx, a, checkpoint.Suspend)
	id := m.newSnapshotID()
	ing := *a
	// The durable copy to come is named, as a suspend's: a workflow that
	// finds the upload interrupted adopts it if it was committed, and
	// otherwise puts the actor back PAUSED (getSettled), its paused
	// checkpoint still on the node.
	ing.State, ing.PendingSnapshot = store.Suspending, a.UID+"/"+id
	a, err = m.update(ctx, a, &ing)
	if err != nil {
		return nil, err
	}
	on, err := m.nodeNamed(a.Node)
	ref := ""
	if err == nil {
		ref, err = on.Upload(ctx, a.PausedSnapshot, a.UID, id, opts.Scope)
	}
	if err == nil {
		ref, err = reportedRef(ref, a.UID)
	}
	if err != nil {
		back := *a
		back.State, back.Message, back.PendingSnapshot = store.Paused, "upload of the paused checkpoint failed: "+err.Error(), ""
		_, _ = m.update(ctx, a, &back)
		return nil, fmt.Errorf("%w: actor %s: %w", ErrSuspendFailed, a.Key(), err)
	}
	done := *a
	done.State, done.Snapshot, done.PausedSnapshot, done.Node, done.PendingSnapshot = store.Suspended, ref, "", "", ""
	done.Message, done.Reason, done.EvictedFor = why.message(checkpoint.Suspend.Done(), idleAfter, a.Atespace), why.Reason, why.EvictedFor
	out, err := m.update(ctx, a, &done)
	if err != nil {
		if !errors.Is(err, store.ErrUnavailable) && !errors.Is(err, store.ErrFenced) {
			m.dropSnapshot(ref)
		}
		// Otherwise the record names the copy as pending, for the next
		// workflow to adopt (finishUpload), which may have already.
		return nil, err
	}
	_ = on.DeletePaused(a.PausedSnapshot)
	m.deleteOld(ctx, a, a.Snapshot)
	return out, nil
}

// dropSnapshot deletes a durable snapshot nobody came to point at.
func (m *Manager) dropSnapshot(ref string) {
	ctx, cancel := context.WithTimeout(m.ctx, time.Minute)
	defer cancel()
	_ = m.snaps.Delete(ctx, ref)
}

// deleteOld removes the actor's previous snapshot; the golden snapshot
// belongs to its template and is never removed here.
func (m *Manager) deleteOld(ctx context.Context, a *store.Actor, ref string) {
	if ref == "" || !strings.HasPrefix(ref, a.UID+"/") {
		return
	}
	if err := m.snaps.Delete(ctx, ref); err != nil {
		m.log.WarnContext(ctx, "delete old snapshot", "actor", a.Key(), "snapshot", ref, "err", err)
	}
}

// Revert returns a RUNNING, PAUSED or CRASHED actor to SUSPENDED at its
// last durable snapshot (or its golden start), discarding memory, the
// paused checkpoint and volume changes since. SUSPENDED is a no-op.
func (m *Manager) Revert(ctx context.Context, key names.ActorKey) (out *store.Actor, err error) {
	err = m.withActor(ctx, key, func(ctx context.Context) error {
		a, err := m.leasedActor(ctx, key)
		if err != nil {
			return err
		}
		switch a.State {
		case store.Suspended:
			out = a
			return nil
		case store.Running, store.Paused, store.Crashed, store.Resuming, store.Suspending, store.Pausing:
		default:
			return fmt.Errorf("%w: actor %s is %s and cannot be reverted", ErrFailedPrecondition, a.Key(), a.State)
		}
		if err := m.stopSandbox(ctx, a); err != nil {
			return err
		}
		r := *a
		r.State, r.Worker, r.PausedSnapshot, r.Node, r.PendingSnapshot = store.Suspended, "", "", "", ""
		r.Message = "reverted to the last durable snapshot"
		if out, err = m.update(ctx, a, &r); err != nil {
			return err
		}
		// An interrupted suspend's snapshot, if it was committed, is
		// discarded with the rest (orphan collection keeps a pending one);
		// an interrupted pause's is on its node's disk.
		switch {
		case !strings.HasPrefix(a.PendingSnapshot, a.UID+"/"):
		case a.State == store.Pausing:
			if n, err := m.nodeOf(a.Worker); err == nil {
				_ = n.DeletePaused(a.PendingSnapshot)
			}
		default:
			m.dropSnapshot(a.PendingSnapshot)
		}
		if n, ok := m.nodes.Get(a.Node); ok && a.PausedSnapshot != "" {
			_ = n.DeletePaused(a.PausedSnapshot)
		}
		m.workerFreed()
		m.log.InfoContext(ctx, "actor reverted", "actor", a.Key(), "from", a.State, "snapshot", a.Snapshot)
		return nil
	})
	return out, err
}

// Delete removes an actor and its snapshots. Without force only a
// SUSPENDED or CRASHED actor may go (others fail with
// ErrFailedPrecondition, telling the user to suspend first); with force
// any state goes, its sandbox stopped first.
func (m *Manager) Delete(ctx context.Context, key names.ActorKey, force bool) error {
	return m.withActor(ctx, key, func(ctx context.Context) error {
		a, err := m.leasedActor(ctx, key)
		if err != nil {
			return err
		}
		if !force && a.State != store.Suspended && a.State != store.Crashed {
			return fmt.Errorf("%w: actor %s is %s; suspend it first (ate suspend actor %s -n %s) or delete with --force",
				ErrFailedPrecondition, a.Key(), a.State, a.Name, a.Atespace)
		}
		if err := m.stopSandbox(ctx, a); err != nil {
			return err
		}
		// The router's activity report for a running actor may land
		// while its sandbox is being stopped: no reason to refuse.
		if a, err = m.onFreshRecord(ctx, a, func(a *store.Actor) error { return m.store.DeleteActor(ctx, a) }); err != nil {
			return err
		}
		m.recordDeleted(a, "deleted on request")
		if a.Worker != "" {
			m.workerFreed()
		}
		if err := m.snaps.DeleteOwner(ctx, a.UID); err != nil {
			m.log.WarnContext(ctx, "delete snapshots", "actor", a.Key(), "err", err)
		}
		m.forgetActor(a.UID)
		return nil
	})
}

// SuspendAll suspends every actor holding one of this store's workers, so
// that stopping the node loses no memory. It tries each actor once and
// returns the first error after trying all.
func (m *Manager) SuspendAll(ctx context.Context) error { return m.suspendOn(ctx, "") }

// SuspendNode is the drain of a node about to stop: it suspends every
// actor holding one of its workers and uploads every checkpoint paused on
// it (suspending those actors), so that nothing of them stays on its disk.
// Finding the paused ones reads every actor, which only a drain does. It
// tries each actor once and returns the first error after trying all.
func (m *Manager) SuspendNode(ctx context.Context, node string) error {
	first := m.suspendOn(ctx, node)
	for token := ""; ; {
		page, next, err := m.store.ListActors(ctx, "", 1000, token)
		if err != nil {
			return cmp.Or(first, err)
		}
		for _, a := range page {
			if a.State != store.Paused || a.Node != node {
				continue
			}
			if _, err := m.Suspend(ctx, a.Key()); err != nil && first == nil {
				first = fmt.Errorf("upload paused %s: %w", a.Key(), err)
			}
		}
		if next == "" {
			return first
		}
		token = next
	}
}

// suspendOn suspends the actors holding workers of node ("" = any).
func (m *Manager) suspendOn(ctx context.Context, node string) error {
	workers, err := m.store.ListWorkers(ctx)
	if err != nil {
		return err
	}
	var first error
	for _, w := range workers {
		if w.Free() || (node != "" && w.Node != node) {
			continue
		}
		if _, err := m.Suspend(ctx, w.Actor); err != nil && first == nil {
			first = fmt.Errorf("suspend %s: %w", w.Actor, err)
		}
	}
	return first
}

// stopSandbox stops the sandbox of the actor's worker. A declared-lost
// node's sandboxes serve nothing and are destroyed when it is welcomed
// again (stop orders). It fails (ErrNodeUnavailable) when the sandbox may
// still serve — its node could not be reached, or is known here only
// from the store, and is not lost — and the caller must then leave the
// actor on its worker: freeing it could let the actor run in two places
// (docs/ha.md, Node leases).
func (m *Manager) stopSandbox(ctx context.Context, a *store.Actor) error {
	if a.Worker == "" {
		return nil
	}
	// A workflow whose lease was taken over (it stood still) must not
	// stop what the new holder started, perhaps on this very worker, for
	// this very actor. The renewal checks the lease in the store; the
	// node checks its token (forNode) against the new holder's, which
	// covers a stall between the renewal and the call.
	if err := m.renewBeforeNodeCall(ctx); err != nil {
		m.log.WarnContext(ctx, "sandbox left alone: this workflow no longer holds the actor's lease", "actor", a.Key(), "worker", a.Worker, "err", err)
		return nil // the workflow's next write is fenced
	}
	n, ok := m.nodes.ForWorker(a.Worker)
	if !ok {
		if m.nodes.Lost(a.Worker) {
			return nil
		}
		return fmt.Errorf("%w: the node of worker %s is neither heard here nor declared lost: actor %s stays on it until it is one or the other", ErrNodeUnavailable, a.Worker, a.Key())
	}
	if err := m.beatFresh(); err != nil {
		return fmt.Errorf("stop actor %s on worker %s: %w", a.Key(), a.Worker, err)
	}
	// The stop outlives the caller's deadline: giving up half-way would
	// leave the actor stuck for the next workflow to stop again.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	switch err := n.Stop(forNode(sctx, a), a.Worker, a.UID); {
	case errors.Is(err, nodeapi.ErrUnreachable):
		return fmt.Errorf("%w: stop actor %s on worker %s: %w", ErrNodeUnavailable, a.Key(), a.Worker, err)
	case errors.Is(err, nodeapi.ErrFenced):
		// A newer workflow has acted on the actor there: nothing this
		// one would write after the stop is its to write.
		return fmt.Errorf("stop actor %s on worker %s: %w", a.Key(), a.Worker, err)
	}
	return nil
}

// stopTimeout bounds one stop of a sandbox (a node answers it in
// milliseconds; one that does not is treated as unreachable).
const stopTimeout = 10 * time.Second

// mayStillRun reports whether a failed call to the node of worker (err)
// leaves a sandbox there that may still serve: the node did not answer,
// or is not heard here, and is not declared lost.
func (m *Manager) mayStillRun(worker string, err error) bool {
	return errors.Is(err, nodeapi.ErrUnreachable) || (errors.Is(err, ErrNodeUnavailable) && !m.nodes.Lost(worker))
}

// PutAwayIfIdle puts the actor key, if it is still the incarnation uid
// and RUNNING, away with its template's idle action once it has had no
// traffic on its worker for the template's idle.after: the router's idle
// policy, for actors woken without a request through a router (alarms),
// which no router watches. It returns when to ask again: zero once there
// is nothing left to watch (put away, not RUNNING, another incarnation,
// gone, or no idle policy). An error (the checkpoint failed) comes with a
// time to try again.
func (m *Manager) PutAwayIfIdle(ctx context.Context, key names.ActorKey, uid string) (again time.Time, err error) {
	a, err := m.store.GetActor(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Now().Add(time.Minute), err
	}
	if a.UID != uid || a.State != store.Running {
		return time.Time{}, nil
	}
	tpl, err := m.store.GetTemplate(ctx, a.Atespace, a.Template)
	if err != nil {
		return time.Now().Add(time.Minute), err
	}
	after, perr := time.ParseDuration(tpl.Spec.GetIdle().GetAfter())
	if perr != nil || after <= 0 {
		return time.Time{}, nil
	}
	now, last := clock.Now(), a.StateTime
	if n, ok := m.nodes.ForWorker(a.Worker); ok {
		if act, ok := n.WorkerActivity(a.Worker); ok && act.ActorUID == uid {
			if streamPolicy(tpl.Spec).Busy(act.InFlight, act.Listeners) > 0 {
				return now.Add(after), nil
			}
			last = act.Last
		}
	}
	if due := last.Add(after); now.Before(due) {
		return due, nil
	}
	// PutAway checks the tunnel's word again under the actor's lock.
	if _, err := m.PutAway(ctx, key, idleAction(tpl.Spec), Why{Reason: store.ReasonIdle}); err != nil {
		if errors.Is(err, ErrFailedPrecondition) {
			return now.Add(after), nil // busy after all, or no longer RUNNING: looked at again
		}
		return now.Add(after), err
	}
	return time.Time{}, nil
}

// reportedRef checks a durable snapshot reference a node reported after
// writing a snapshot for owner (an actor's, tag's or fork's uid). A node is
// trusted with the actor it hosts, not with others: a reference to another
// owner's snapshot would point this record at it, and a later suspend or
// delete would delete it, so it is refused (security.md, Snapshot
// integrity).
func reportedRef(ref, owner string) (string, error) {
	got, _, err := snapshot.SplitRef(ref)
	if err == nil && got != owner {
		err = fmt.Errorf("owner %s, want %s", got, owner)
	}
	if err != nil {
		return "", fmt.Errorf("%w: %q: %w", ErrForeignSnapshot, ref, err)
	}
	return ref, nil
}
