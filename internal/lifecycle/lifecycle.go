// Package lifecycle runs the actor workflows — resume, suspend, pause,
// revert, delete, golden builds — over the record store, the snapshot
// store and a node. Every workflow follows the rules in
// docs/architecture.md (State and failure rules): write the -ING state
// before touching the node, make every write compare-and-set, hold the
// actor's lease, and never leave an actor wedged or a worker claimed
// after a failure. Actors are named by names.ActorKey throughout.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/metrics"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/node"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/store"
)

// Node is what workflows need from a node agent.
type Node interface {
	Name() string
	Start(ctx context.Context, req node.StartRequest) error
	Checkpoint(ctx context.Context, worker, actorUID string, opts node.CheckpointOptions) (string, error)
	Stop(ctx context.Context, worker, actorUID string) error
	BuildGolden(ctx context.Context, tplUID, atespace, tplName string, spec *atev1.ActorTemplateSpec, snapshotID string) (ref, digest string, err error)
	Upload(ctx context.Context, pausedRef, owner, snapshotID string, scope snapshot.Scope) (string, error)
	DeletePaused(ref string) error
	ForgetActor(actorUID string)
	// StandbyWorkers lists the node's free workers holding a sandbox
	// prepared for spec (from image imageDigest); claims prefer them.
	StandbyWorkers(spec *atev1.ActorTemplateSpec, imageDigest string) []string
	// WorkerActivity is what the worker tunnel saw of the actor worker
	// hosts (ok false when none); eviction picks victims by it.
	WorkerActivity(worker string) (node.Activity, bool)
}

// Snapshots is the durable snapshot store as workflows use it.
type Snapshots interface {
	Delete(ctx context.Context, ref string) error
	DeleteOwner(ctx context.Context, owner string) error
	List(ctx context.Context) ([]string, error)
	ClearStaging() error
}

// Tuning. LeaseTTL outlives the longest workflow step (a cold boot waits up
// to node.DefaultProbeTimeout); the lease is released at the end anyway.
const (
	LeaseTTL = 3 * time.Minute
	// nodeOpTimeout bounds a node operation once started; it runs detached
	// from the caller so a client hanging up mid-restore cannot wedge it.
	nodeOpTimeout = 2 * time.Minute
	// claimPoll re-checks for free workers that another API server
	// replica freed, which this process is not told about.
	claimPoll = 250 * time.Millisecond
)

// Manager runs workflows. Safe for concurrent use.
type Manager struct {
	store  store.Store
	nodes  Nodes
	snaps  Snapshots
	holder string
	log    *slog.Logger
	// metrics is nil unless SetMetrics was called.
	metrics *metrics.Lifecycle

	locks keyedMutex[names.ActorKey]
	// queue orders resumes waiting for a worker (capacity.go).
	queue queue

	// ctx bounds the manager's own goroutines (dispatch, evictions);
	// Close cancels it and waits for them.
	ctx    context.Context
	cancel context.CancelFunc
	owned  sync.WaitGroup
}

// New returns a Manager. holder names this API server in the store's
// per-actor leases, which fence workflows across API server replicas. An
// empty holder declares this the only API server over the store (the
// embedded store, whose file lock guarantees it): workflows are then
// serialised by the in-process per-actor lock alone, which saves two
// fsync'd store writes per workflow (BENCHMARKS.md, control plane).
func New(s store.Store, n Nodes, snaps Snapshots, holder string, logger *slog.Logger) *Manager {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{store: s, nodes: n, snaps: snaps, holder: holder, log: logger, ctx: ctx, cancel: cancel}
}

// SetMetrics makes the manager record its workflows in l. Call it before
// the manager is used.
func (m *Manager) SetMetrics(l *metrics.Lifecycle) { m.metrics = l }

// Close stops the manager's background work — handing workers to waiting
// resumes, evictions, golden builds and self-requested suspensions — and
// waits for it to end. Evictions under way are
// cancelled between steps, never mid-checkpoint (workflows detach node
// operations), so no actor is left wedged.
func (m *Manager) Close() {
	m.cancel()
	m.owned.Wait()
}

// goOwned runs f on a goroutine that Close waits for.
func (m *Manager) goOwned(f func(ctx context.Context)) {
	m.owned.Go(func() { f(m.ctx) })
}

// workerFreed hands the freed worker to the oldest resume waiting for one.
func (m *Manager) workerFreed() { m.kick() }

// withActor runs fn holding the actor's in-process lock and store lease.
// The in-process lock makes concurrent callers queue instead of polling
// the lease; the lease fences other replicas.
func (m *Manager) withActor(ctx context.Context, key names.ActorKey, fn func() error) error {
	unlock, err := m.locks.lock(ctx, key)
	if err != nil {
		return err
	}
	defer unlock()
	return m.leased(ctx, key, fn)
}

// leased runs fn holding the actor's store lease (none with an empty
// holder); the caller holds its in-process lock.
func (m *Manager) leased(ctx context.Context, key names.ActorKey, fn func() error) error {
	if m.holder == "" {
		return fn()
	}
	lease := "actor/" + key.String()
	for {
		_, err := m.store.AcquireLease(ctx, lease, m.holder, LeaseTTL)
		if err == nil {
			break
		}
		if !errors.Is(err, store.ErrLeaseHeld) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("actor %s is busy in another API server: %w", key, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	defer func() {
		if err := m.store.ReleaseLease(context.WithoutCancel(ctx), lease, m.holder); err != nil {
			m.log.Warn("release lease", "actor", key, "err", err)
		}
	}()
	return fn()
}

// update writes next, a copy of base with lifecycle fields
// (store.Lifecycle) changed. The write is compare-and-set on base's
// version; when it loses only to a change of other fields (the router's
// last_activity, a new worker selector), it re-applies next's lifecycle
// fields onto the fresh record and tries again. A change of the lifecycle
// fields themselves is a real conflict and is returned
// (store.ErrConflict): a late finisher never overwrites another
// workflow's state.
func (m *Manager) update(ctx context.Context, base, next *store.Actor) (*store.Actor, error) {
	ctx = context.WithoutCancel(ctx)
	next.StateTime = time.Now().UTC()
	for attempt := 0; ; attempt++ {
		out, err := m.store.UpdateActor(ctx, next)
		if err == nil {
			m.log.DebugContext(ctx, "actor state", "actor", next.Key(), "state", next.State, "worker", next.Worker)
			return out, nil
		}
		if !errors.Is(err, store.ErrConflict) || attempt == 5 {
			return nil, err
		}
		cur, gerr := m.store.GetActor(ctx, base.Key())
		if gerr != nil || !sameLifecycle(cur, base) {
			return nil, err
		}
		merged := *cur
		merged.Lifecycle, merged.StateTime = next.Lifecycle, next.StateTime
		base, next = cur, &merged
	}
}

// sameLifecycle reports whether a and b are one incarnation and agree on
// every field workflows own.
func sameLifecycle(a, b *store.Actor) bool {
	return a.UID == b.UID && a.Lifecycle == b.Lifecycle
}

// recoverLocked returns an actor left in RESUMING or SUSPENDING by a
// workflow that died (this process holds its lease now, so none runs) to a
// resumable state at its last snapshot, freeing its worker.
func (m *Manager) recoverLocked(ctx context.Context, a *store.Actor, why string) (*store.Actor, error) {
	// A worker of a lost node has no sandbox to stop; the node is told to
	// destroy it if it ever comes back (nodeagent's stop orders).
	m.stopSandbox(ctx, a)
	n := *a
	n.State, n.Worker, n.Message = store.Crashed, "", why
	out, err := m.update(ctx, a, &n)
	if err == nil && a.Worker != "" {
		m.workerFreed()
	}
	return out, err
}

// Recover repairs state after this node restarted: every actor holding a
// worker has lost its sandbox, so it becomes CRASHED at its last snapshot
// (resumable), staging leftovers are removed, and unfinished golden builds
// start again. It reads the workers and templates, never every actor, so
// start-up does not grow with the number of actors; CollectGarbage, which
// does, runs afterwards while the API serves.
func (m *Manager) Recover(ctx context.Context) error {
	if err := m.recoverWorkers(ctx); err != nil {
		return err
	}
	return m.RecoverStore(ctx)
}

// RecoverStore is Recover for an API server whose nodes run apart from it
// and outlive it: their actors are left as they are, to be reconciled by
// each node's registration (internal/nodeagent); it only clears snapshot
// staging and restarts unfinished golden builds.
func (m *Manager) RecoverStore(ctx context.Context) error {
	if err := m.snaps.ClearStaging(); err != nil {
		return fmt.Errorf("clear snapshot staging: %w", err)
	}
	return m.resumeGoldenBuilds(ctx)
}

// recoverWorkers marks every actor that holds a worker CRASHED at its
// last snapshot: its sandbox died with the previous process.
func (m *Manager) recoverWorkers(ctx context.Context) error {
	workers, err := m.store.ListWorkers(ctx)
	if err != nil {
		return err
	}
	for _, w := range workers {
		if w.Free() {
			continue
		}
		if err := m.crashHolder(ctx, w, "node restarted: memory since the last snapshot was lost"); err != nil {
			return fmt.Errorf("recover actor %s: %w", w.Actor, err)
		}
	}
	return nil
}

// CollectGarbage deletes every durable snapshot staged before cutoff that
// no actor or template points to: leftovers of a crash between a commit
// and the pointer move, or between the pointer move and the old
// snapshot's deletion. Pass the time Recover started, before the API
// served: workflows running meanwhile only stage snapshots after it, and
// only ever move pointers to those, so nothing they write or still need
// is taken. It pages through every actor (BENCHMARKS.md, Control plane:
// Stored actors).
func (m *Manager) CollectGarbage(ctx context.Context, cutoff time.Time) error {
	live := map[string]bool{}
	tpls, err := m.store.ListTemplates(ctx, "")
	if err != nil {
		return err
	}
	for _, t := range tpls {
		live[t.GoldenSnapshot] = true
	}
	for token := ""; ; {
		page, next, err := m.store.ListActors(ctx, "", 1000, token)
		if err != nil {
			return err
		}
		for _, a := range page {
			live[a.Snapshot] = true
		}
		if next == "" {
			break
		}
		token = next
	}
	refs, err := m.snaps.List(ctx)
	if err != nil {
		return err
	}
	for _, ref := range refs {
		if !live[ref] && snapshot.StagedBefore(ref, cutoff) {
			m.log.InfoContext(ctx, "deleting unreferenced snapshot", "snapshot", ref)
			if err := m.snaps.Delete(ctx, ref); err != nil {
				return err
			}
		}
	}
	return nil
}

// SelfRequest is an actor asking, from inside its sandbox, to be
// suspended or paused. It runs the workflow in the background, on a
// goroutine the manager owns, since the caller is the actor being
// checkpointed.
func (m *Manager) SelfRequest(worker, actorUID string, action checkpoint.Action) {
	m.goOwned(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 2*LeaseTTL)
		defer cancel()
		key, ok := m.holderOf(ctx, worker, actorUID)
		if !ok {
			return
		}
		if _, err := m.PutAway(ctx, key, action, Why{Reason: store.ReasonSelfRequested}); err != nil {
			m.log.Warn("self-requested checkpoint failed", "actor", key, "action", action, "err", err)
		}
	})
}

// WorkerExited is the node's report that an actor's sandbox died on its
// own: the actor becomes CRASHED at its last snapshot, resumable, and its
// worker is free.
func (m *Manager) WorkerExited(worker, actorUID string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key, ok := m.holderOf(ctx, worker, actorUID)
	if !ok {
		return
	}
	w := &store.Worker{Name: worker, ActorUID: actorUID, Actor: key}
	if err := m.crashHolder(ctx, w, "sandbox exited unexpectedly on worker "+worker); err != nil {
		m.log.Warn("record crashed actor", "worker", worker, "err", err)
	}
}

// crashHolder makes the actor holding w CRASHED at its last snapshot with
// why as its message, if it is still the incarnation w names on w; a
// stale report (the actor deleted, recreated or moved) only frees w if
// that incarnation still holds it.
func (m *Manager) crashHolder(ctx context.Context, w *store.Worker, why string) error {
	return m.withActor(ctx, w.Actor, func() error {
		a, err := m.store.GetActor(ctx, w.Actor)
		if errors.Is(err, store.ErrNotFound) || (err == nil && (a.UID != w.ActorUID || a.Worker != w.Name)) {
			return m.store.ReleaseWorker(ctx, w.Name, w.ActorUID)
		}
		if err != nil {
			return err
		}
		_, err = m.recoverLocked(ctx, a, why)
		return err
	})
}

// holderOf returns the actor holding worker, ok only if that actor is
// still actorUID (a report about a worker since freed or reassigned is
// stale).
func (m *Manager) holderOf(ctx context.Context, worker, actorUID string) (names.ActorKey, bool) {
	w, err := m.store.GetWorker(ctx, worker)
	if err != nil || w.ActorUID != actorUID {
		return names.ActorKey{}, false
	}
	return w.Actor, true
}
