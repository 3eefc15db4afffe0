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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/clock"
	"substrate.dev/ate/internal/metrics"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/store"
)

// Snapshots is the durable snapshot store as workflows use it.
type Snapshots interface {
	// Committed returns ref with its manifest digest once ref is complete
	// (snapshot.Store).
	Committed(ctx context.Context, ref string) (string, error)
	Delete(ctx context.Context, ref string) error
	DeleteOwner(ctx context.Context, owner string) error
	List(ctx context.Context) ([]string, error)
	ClearStaging() error
	Clone(ctx context.Context, src, owner, id string) (string, error)
}

// LeaseConfig configures the per-actor leases that fence workflows across
// API server replicas (Manager.SetLeases). A lease is renewed while its
// workflow runs, so Duration bounds not the workflow but how long an
// actor stays unavailable after the replica running its workflow died:
// another replica takes it over once the lease expires, or sooner, once
// that replica's heartbeat has lapsed (holderSilence).
type LeaseConfig struct {
	// Duration is a lease's life unrenewed. Default 10 s: Kubernetes'
	// leader election uses 15 s with renewals every 2 s; actors are
	// smaller stakes and a takeover waits this long.
	Duration time.Duration
	// RenewEvery is the renewal period; default Duration/3, so two
	// renewals may fail before the lease lapses.
	RenewEvery time.Duration
	// Jitter spreads renewals by ±Jitter×RenewEvery (0 ≤ Jitter < 1) so
	// workflows started together do not renew in lockstep; default 0.2.
	Jitter float64
}

// Lease defaults (LeaseConfig).
const (
	DefaultLeaseDuration = 10 * time.Second
	DefaultLeaseJitter   = 0.2
)

func (c LeaseConfig) withDefaults() LeaseConfig {
	if c.Duration <= 0 {
		c.Duration = DefaultLeaseDuration
	}
	if c.RenewEvery <= 0 || c.RenewEvery >= c.Duration {
		c.RenewEvery = c.Duration / 3
	}
	if c.Jitter < 0 || c.Jitter >= 1 {
		c.Jitter = DefaultLeaseJitter
	}
	return c
}

// Tuning.
const (
	// storeOutageWait is how long a workflow's write of what the node
	// did waits for an unreachable store (a PostgreSQL restart takes
	// seconds) before giving up and leaving recovery to the next
	// workflow.
	storeOutageWait = 30 * time.Second
	// workflowTimeout bounds a background workflow (a self-requested
	// checkpoint, an eviction): its node operation (nodeOpTimeout) and
	// the store writes around it.
	workflowTimeout = 2 * nodeOpTimeout
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
	nodes  nodeapi.Nodes
	snaps  Snapshots
	holder string
	log    *slog.Logger
	// metrics is nil unless SetMetrics was called.
	metrics *metrics.Lifecycle

	leases LeaseConfig
	// beat is this replica's heartbeat as it has seen it (heartbeat).
	beat beatState
	// refused holds, by node, until when placement passes over a node
	// that refused a start as not serving (capacity.go, notServing).
	refusedMu     sync.Mutex
	refused       map[string]time.Time
	notServingFor time.Duration // 0: defaultNotServingFor
	// evictLimits are the operator's bounds on eviction policies.
	evictLimits EvictionLimits

	// minted are the snapshot ids minted here, until the start-up
	// collection ends (orphans.go).
	minted mintedIDs

	locks keyedMutex[names.ActorKey]
	// queue orders resumes waiting for a worker (capacity.go).
	queue queue
	// expiry is where the next expiry sweep pass goes on (expiry.go).
	expiry expiryCursor
	// events queues state changes for the store (events.go).
	events chan *store.Event

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
func New(s store.Store, n nodeapi.Nodes, snaps Snapshots, holder string, logger *slog.Logger) *Manager {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{store: s, nodes: n, snaps: snaps, holder: holder, log: logger, leases: LeaseConfig{}.withDefaults(), ctx: ctx, cancel: cancel,
		events: make(chan *store.Event, eventQueue), beat: beatState{first: make(chan struct{})}}
	m.goOwned(m.writeEvents)
	if holder != "" {
		m.goOwned(m.heartbeat)
	}
	return m
}

// holderSilence is how long a replica may go without renewing its
// heartbeat (store.HolderKey) before the others take over the actor
// leases it holds (store.TakeOverLease) without waiting for them to
// expire: a replica that stands still (SIGSTOP, a frozen VM, cut off
// from the store) costs the actors it was working on about this much,
// not a lease (LeaseConfig.Duration). Safe however short, since what the
// old holder may still do is fenced by the lease's token, in the store
// and on the nodes (docs/ha.md); a shorter one only makes a replica
// that is merely slow lose workflows more often. It beats five times
// per silence.
const holderSilence = 1500 * time.Millisecond

// beatState is what this replica knows of its own heartbeat. Safe for
// concurrent use.
type beatState struct {
	mu sync.Mutex
	// lastOK is when the last beat the store took was sent: the store
	// counts its expiry from later, so it runs until at least lastOK +
	// holderSilence by this process's monotonic clock.
	lastOK time.Time
	// upSince is when beats began to succeed again (zero while failing):
	// from then on every replica could renew its own.
	upSince time.Time
	// first is closed once the first beat has been tried.
	first     chan struct{}
	firstOnce sync.Once
}

func (b *beatState) record(sent time.Time, ok bool) {
	defer b.firstOnce.Do(func() { close(b.first) })
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !ok:
		b.upSince = time.Time{}
	case b.upSince.IsZero():
		b.upSince, b.lastOK = sent, sent
	default:
		b.lastOK = sent
	}
}

// mayTakeOver reports whether this replica may take leases over from
// silent ones: only once its own beats have gone through for a whole
// silence. After a store outage every heartbeat has lapsed; without
// this, the first replica back would take over the workflows the others
// are waiting the outage out with, before they could beat again.
func (m *Manager) mayTakeOver() bool {
	m.beat.mu.Lock()
	defer m.beat.mu.Unlock()
	return !m.beat.upSince.IsZero() && time.Since(m.beat.upSince) >= holderSilence
}

// errHeartbeatStale: this replica cannot be sure its heartbeat is alive,
// so another may be taking its actors over; it asks no node to start,
// checkpoint or stop a sandbox meanwhile.
var errHeartbeatStale = fmt.Errorf("this API server's heartbeat in the record store may have lapsed (the store is slow or unreachable from it), so another may be taking its actors over: %w", store.ErrUnavailable)

// beatFresh fails with errHeartbeatStale unless this replica's heartbeat
// is alive by its own count, with a fifth of a silence to spare: checked
// just before a node call that changes a sandbox, so that a replica
// that stood still past its silence does not act on what others may
// have taken over. The node's token check covers a stall between this
// check and the call when the new holder has reached the node first.
func (m *Manager) beatFresh() error {
	if m.holder == "" {
		return nil
	}
	// A manager just made has not beaten yet.
	select {
	case <-m.beat.first:
	case <-time.After(holderSilence):
	}
	m.beat.mu.Lock()
	defer m.beat.mu.Unlock()
	if m.beat.lastOK.IsZero() || time.Since(m.beat.lastOK) >= holderSilence*4/5 {
		return errHeartbeatStale
	}
	return nil
}

// heartbeat keeps this replica's heartbeat lease alive until ctx ends.
// Over PostgreSQL a beat commits without waiting for its flush, like any
// acquisition: one lost in a crash makes the replica look silent for a
// moment, which only lets others take over what it holds, fenced.
func (m *Manager) heartbeat(ctx context.Context) {
	key := store.HolderKey(m.holder)
	tick := time.NewTicker(holderSilence / 5)
	defer tick.Stop()
	failing := false
	for {
		bctx, cancel := context.WithTimeout(ctx, holderSilence)
		sent := time.Now()
		_, err := m.store.AcquireLease(bctx, key, m.holder, holderSilence)
		cancel()
		m.beat.record(sent, err == nil)
		switch {
		case ctx.Err() != nil:
			m.stopHeartbeat(key)
			return
		case err != nil && !failing:
			m.log.Warn("replica heartbeat failed: other replicas may take over the actors this one is working on", "holder", m.holder, "err", err)
		case err == nil && failing:
			m.log.Info("replica heartbeat renewed again", "holder", m.holder)
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			m.stopHeartbeat(key)
			return
		case <-tick.C:
		}
	}
}

// stopHeartbeat lets this replica's heartbeat lapse at once as the
// manager closes, so what it still holds is taken over without waiting.
// The row stays (a holder with none would never count as silent).
func (m *Manager) stopHeartbeat(key string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _ = m.store.AcquireLease(ctx, key, m.holder, 0)
}

// SetLeases sets the per-actor lease configuration (zero fields take
// their defaults). Call it before the manager is used.
func (m *Manager) SetLeases(c LeaseConfig) { m.leases = c.withDefaults() }

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

// withActor runs fn holding the actor's in-process lock and store lease,
// with a ctx whose store writes are fenced by the lease (store.WithFence).
// The in-process lock makes concurrent callers queue instead of polling
// the lease; the lease fences other replicas.
func (m *Manager) withActor(ctx context.Context, key names.ActorKey, fn func(ctx context.Context) error) error {
	unlock, err := m.locks.lock(ctx, key)
	if err != nil {
		return err
	}
	defer unlock()
	return m.leased(ctx, key, fn)
}

// leased runs fn holding the actor's store lease (none with an empty
// holder), renewed while fn runs; the caller holds its in-process lock.
// fn's ctx fences its actor writes with the lease, so if this process
// stalls past the lease (a GC pause, SIGSTOP, a partition from the store)
// and another replica takes the actor over, every later write of fn is
// refused by the store (store.ErrFenced) whatever fn believes.
func (m *Manager) leased(ctx context.Context, key names.ActorKey, fn func(ctx context.Context) error) error {
	if m.holder == "" {
		return fn(ctx)
	}
	cfg := m.leases
	name := actorLease(key)
	var lease *store.Lease
	for {
		var err error
		// From a replica that fell silent, too: it is fenced.
		if lease, ctx, err = m.acquire(ctx, name, key, m.mayTakeOver()); err == nil {
			break
		}
		if !errors.Is(err, store.ErrLeaseHeld) {
			return err
		}
		m.metrics.LeaseConflict()
		select {
		case <-ctx.Done():
			return fmt.Errorf("actor %s is busy in another API server: %w", key, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	fence := store.Fence{Key: name, Holder: m.holder, Token: lease.Token}
	if lease.TakenFrom != "" {
		m.fenceTakenOver(ctx, key, fence, lease.TakenFrom)
	}
	renewing, stop := context.WithCancel(context.WithoutCancel(ctx))
	var renewer sync.WaitGroup
	renewer.Go(func() { m.renew(renewing, fence, cfg) })
	defer func() {
		stop()
		renewer.Wait()
		if err := m.store.ReleaseLease(context.WithoutCancel(ctx), name, m.holder); err != nil {
			m.log.Warn("release lease", "actor", key, "err", err)
		}
	}()
	return fn(store.WithFence(ctx, fence))
}

// acquire takes the actor lease name of key for this replica, taking it
// over from a silent holder with takeOver. When the store reads the
// actor and its template in the same round trip (store.ActorLeaser), the
// returned ctx carries them for the workflow's first reads (leasedActor,
// leasedTemplate).
func (m *Manager) acquire(ctx context.Context, name string, key names.ActorKey, takeOver bool) (*store.Lease, context.Context, error) {
	if l, ok := m.store.(store.ActorLeaser); ok {
		lease, a, tpl, err := l.LeaseActor(ctx, name, key, m.holder, m.leases.Duration, takeOver)
		if err != nil {
			return nil, ctx, err
		}
		r := &leasedRead{key: key}
		r.actor.Store(a)
		r.tpl.Store(tpl)
		return lease, context.WithValue(ctx, leasedReadKey{}, r), nil
	}
	var lease *store.Lease
	var err error
	if takeOver {
		lease, err = m.store.TakeOverLease(ctx, name, m.holder, m.leases.Duration)
	} else {
		lease, err = m.store.AcquireLease(ctx, name, m.holder, m.leases.Duration)
	}
	return lease, ctx, err
}

// leasedRead is what an actor's lease brought along (acquire): the
// actor's record and its template as they stood once the lease was held.
// Each is handed out once, to the workflow's first read of it, which
// would otherwise read the same thing again; every later read goes to
// the store, as before, so a workflow never reads its own writes stale.
type leasedRead struct {
	key   names.ActorKey
	actor atomic.Pointer[store.Actor]
	tpl   atomic.Pointer[store.Template]
}

type leasedReadKey struct{}

// leasedActor reads key's actor: the record its lease brought (once),
// else the store's. Only for a workflow's first read of its actor,
// before it writes it.
func (m *Manager) leasedActor(ctx context.Context, key names.ActorKey) (*store.Actor, error) {
	if r, ok := ctx.Value(leasedReadKey{}).(*leasedRead); ok && r.key == key {
		if a := r.actor.Swap(nil); a != nil {
			return a, nil
		}
	}
	return m.store.GetActor(ctx, key)
}

// leasedTemplate reads a's template: the one a's lease brought (once),
// else the store's.
func (m *Manager) leasedTemplate(ctx context.Context, a *store.Actor) (*store.Template, error) {
	if r, ok := ctx.Value(leasedReadKey{}).(*leasedRead); ok && r.key == a.Key() {
		if t := r.tpl.Load(); t != nil && t.Atespace == a.Atespace && t.Name == a.Template && r.tpl.CompareAndSwap(t, nil) {
			return t, nil
		}
	}
	return m.store.GetTemplate(ctx, a.Atespace, a.Template)
}

// fenceTakenOver tells the node of key's actor, if any, the token of
// the lease f just taken from a holder, from, that never released it:
// that holder may still send a late start, checkpoint or stop, which the
// node then refuses even if this workflow asks the node nothing else (a
// resume that finds the actor RUNNING). Best effort: a node that cannot
// be told now is reached by this workflow's own calls if it makes any
// (docs/ha.md, Known limits).
func (m *Manager) fenceTakenOver(ctx context.Context, key names.ActorKey, f store.Fence, from string) {
	a, err := m.store.GetActor(ctx, key)
	if err != nil {
		return
	}
	var n nodeapi.Node
	ok := false
	switch {
	case a.Worker != "":
		n, ok = m.nodes.ForWorker(a.Worker)
	case a.Node != "": // PAUSED there
		n, ok = m.nodes.Get(a.Node)
	}
	if !ok {
		return
	}
	if err := m.renewBeforeNodeCall(store.WithFence(ctx, f)); err != nil {
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fenceTimeout)
	defer cancel()
	if err := n.FenceActor(nodeapi.WithFence(fctx, f.Token), a.UID); err != nil {
		m.log.WarnContext(ctx, "could not tell the node the actor's lease was taken over", "actor", key, "from", from, "node", n.Name(), "err", err)
		return
	}
	m.log.InfoContext(ctx, "actor lease taken over; its node told", "actor", key, "from", from, "node", n.Name(), "token", f.Token)
}

// renewBeforeNodeCall renews, durably, the lease ctx is fenced with, if
// any: the check a workflow makes just before it asks a node to act on a
// sandbox. It also flushes the lease's acquisition, which commits
// without waiting for it over PostgreSQL, before its token reaches a
// node (forNode; docs/ha.md, Node calls are fenced).
func (m *Manager) renewBeforeNodeCall(ctx context.Context) error {
	f, ok := store.FenceFrom(ctx)
	if !ok {
		return nil
	}
	_, err := m.store.RenewLease(ctx, f.Key, f.Holder, f.Token, m.leases.Duration)
	return err
}

// fenceTimeout bounds fenceTakenOver's call (a node answers it at once).
const fenceTimeout = 2 * time.Second

// actorLease names key's lease in the store.
func actorLease(key names.ActorKey) string { return "actor/" + key.String() }

// forNode returns ctx for a node call that starts, checkpoints or stops
// a: it carries the token of a's lease (nodeapi.WithFence) when ctx is
// fenced by that lease, so the node refuses the call once a newer
// workflow has acted on a. A call about another actor than the lease's
// carries none: the node keeps tokens per actor.
func forNode(ctx context.Context, a *store.Actor) context.Context {
	if t := leaseToken(ctx, a); t != 0 {
		return nodeapi.WithFence(ctx, t)
	}
	return ctx
}

// leaseToken is the token of a's lease when ctx is fenced by it, else 0.
func leaseToken(ctx context.Context, a *store.Actor) int64 {
	if f, ok := store.FenceFrom(ctx); ok && f.Key == actorLease(a.Key()) {
		return f.Token
	}
	return 0
}

// renew keeps f's lease alive until ctx ends, every cfg.RenewEvery with
// jitter, and gives up once the store says it is lost: the workflow's
// writes are then refused anyway.
func (m *Manager) renew(ctx context.Context, f store.Fence, cfg LeaseConfig) {
	err := store.KeepRenewed(ctx, m.store, f, cfg.Duration, cfg.RenewEvery, cfg.Jitter, func(err error) {
		m.log.Warn("actor lease renewal failed; retrying", "lease", f.Key, "err", err)
	})
	if err != nil {
		m.log.Warn("actor lease lost mid-workflow: another API server may have taken the actor over; this workflow's writes will be refused",
			"lease", f.Key, "token", f.Token)
	}
}

// update writes next, a copy of base with lifecycle fields
// (store.Lifecycle) changed. The write is compare-and-set on base's
// version; when it loses only to a change of other fields (the router's
// last_activity, a new worker selector), it re-applies next's lifecycle
// fields onto the fresh record and tries again. A change of the lifecycle
// fields themselves is a real conflict and is returned
// (store.ErrConflict): a late finisher never overwrites another
// workflow's state.
//
// A write that moves the snapshot pointer clears VolumesOnly: the new
// snapshot was taken under the actor's current template, so all of it
// is the actor's (until then a revert or a lost node falls back to the
// snapshot from before a template move, whose memory is not).
func (m *Manager) update(ctx context.Context, base, next *store.Actor) (*store.Actor, error) {
	ctx = context.WithoutCancel(ctx)
	next.StateTime = clock.Now().UTC()
	if next.Snapshot != base.Snapshot {
		next.VolumesOnly = false
	}
	began, pause := time.Now(), 100*time.Millisecond
	unsure := false // an earlier attempt may have committed unseen
	for attempt := 0; ; {
		out, err := m.store.UpdateActor(ctx, next)
		if err == nil {
			m.log.DebugContext(ctx, "actor state", "actor", next.Key(), "state", next.State, "worker", next.Worker)
			m.recordChange(base, out)
			return out, nil
		}
		// This write records what the node already did (the -ING state
		// was written first): giving up on a store outage would leave
		// the actor wedged in that state, so it waits the outage out —
		// a database restart or failover — as long as its lease holds
		// (ErrFenced ends it). The ctx is detached: nobody cancels it.
		if errors.Is(err, store.ErrUnavailable) && time.Since(began) < storeOutageWait {
			m.log.WarnContext(ctx, "store unavailable; retrying the actor's write", "actor", next.Key(), "state", next.State, "err", err)
			time.Sleep(pause) // backoff between attempts, not synchronisation
			pause = min(2*pause, time.Second)
			unsure = true
			continue
		}
		if !errors.Is(err, store.ErrConflict) || attempt == 5 {
			return nil, err
		}
		attempt++
		m.metrics.CASRetry()
		cur, gerr := m.store.GetActor(ctx, base.Key())
		if gerr == nil && unsure && cur.UID == next.UID && cur.Lifecycle == next.Lifecycle {
			m.recordChange(base, cur)
			return cur, nil // the attempt whose answer was lost committed
		}
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
	// destroy it if it ever comes back (nodeagent's stop orders). One
	// that cannot be reached and is not lost keeps the actor.
	if err := m.stopSandbox(ctx, a); err != nil {
		return nil, err
	}
	if out, adopted, err := m.adoptPending(ctx, a); adopted || err != nil {
		return out, err
	}
	n := *a
	n.State, n.Worker, n.Message, n.PendingSnapshot = store.Crashed, "", why, ""
	out, err := m.update(ctx, a, &n)
	if err == nil && a.Worker != "" {
		m.workerFreed()
	}
	return out, err
}

// getSettled reads the actor; one found RESUMING, SUSPENDING or PAUSING
// is settled first (recoverLocked): the caller holds its lock and lease,
// so no workflow runs it, and one died before its last write (its
// replica, or its store, went away).
func (m *Manager) getSettled(ctx context.Context, key names.ActorKey) (*store.Actor, error) {
	a, err := m.leasedActor(ctx, key)
	if err != nil {
		return nil, err
	}
	switch a.State {
	case store.Suspending, store.Pausing, store.Resuming:
		return m.settleLocked(ctx, a, "interrupted "+string(a.State)+" was rolled back to the last snapshot")
	}
	return a, nil
}

// settleLocked ends a as a workflow that died, or a sandbox that is
// gone, leaves it: an interrupted checkpoint is finished where its node
// still has it (finishUpload, finishInterrupted), and otherwise the
// actor goes back to its last snapshot (recoverLocked, with why). The
// caller holds its lock and lease.
func (m *Manager) settleLocked(ctx context.Context, a *store.Actor, why string) (*store.Actor, error) {
	switch a.State {
	case store.Suspending, store.Pausing:
		if a.State == store.Suspending && a.Worker == "" && a.PausedSnapshot != "" {
			return m.finishUpload(ctx, a)
		}
		if out, done, err := m.finishInterrupted(ctx, a); done || err != nil {
			return out, err
		}
	}
	return m.recoverLocked(ctx, a, why)
}

// finishInterrupted asks a's node again for the checkpoint of an actor
// left SUSPENDING or PAUSING by a workflow whose call to the node failed
// without an answer (it never arrived, or its answer was lost to a
// partition). The sandbox may still run there and hold everything the
// actor answered since its last snapshot: stopping it and rolling back,
// as for a sandbox that is gone, would lose that acknowledged work. The
// node runs one operation on a worker at a time, so a checkpoint of the
// first call still under way finishes before this one, which then finds
// the worker empty (nodeapi.ErrStale): done is false and the caller
// adopts what that one committed, or rolls back if it failed. done is
// false, too, when the node is lost or not heard here (recoverLocked
// decides), or the suspend's pending snapshot is already committed.
func (m *Manager) finishInterrupted(ctx context.Context, a *store.Actor) (_ *store.Actor, done bool, _ error) {
	paused := a.State == store.Pausing
	pending := strings.HasPrefix(a.PendingSnapshot, a.UID+"/")
	if a.Worker == "" || (!paused && !pending) {
		return nil, false, nil
	}
	on, err := m.nodeOf(a.Worker)
	if err != nil {
		return nil, false, nil
	}
	if !paused {
		switch _, err := m.snaps.Committed(ctx, a.PendingSnapshot); {
		case err == nil:
			return nil, false, nil // adoptPending's to adopt
		case !errors.Is(err, snapshot.ErrNotFound):
			// Unsure: stopping the sandbox now (recoverLocked) could
			// destroy the only copy of what the actor answered.
			return nil, true, fmt.Errorf("actor %s: is the interrupted suspend's snapshot %s committed? %w", a.Key(), a.PendingSnapshot, err)
		}
	}
	action := checkpoint.Suspend
	if paused {
		action = checkpoint.Pause
	}
	opts, _ := m.checkpointOptionsFor(ctx, a, action)
	switch {
	case pending:
		// The pending id, so that whichever of the two calls the node
		// ran is the snapshot the record already names. For a pause the
		// node answers a repeated id with the checkpoint it committed:
		// the pause finished there, its PAUSED write was what was lost.
		opts.ID = strings.TrimPrefix(a.PendingSnapshot, a.UID+"/")
		if !paused {
			m.minted.add(opts.ID)
		}
	default:
		// A PAUSING record written before pauses recorded their id.
		opts.ID = m.newSnapshotID()
	}
	// As stopSandbox: the lease is checked in the store first, and its
	// token by the node (forNode).
	if err := m.renewBeforeNodeCall(ctx); err != nil {
		return nil, true, fmt.Errorf("actor %s: interrupted %s left alone: %w", a.Key(), a.State, err)
	}
	if err := m.beatFresh(); err != nil {
		return nil, true, fmt.Errorf("actor %s: interrupted %s left alone: %w", a.Key(), a.State, err)
	}
	m.log.InfoContext(ctx, "interrupted checkpoint asked of its node again: the sandbox may still hold what the actor answered",
		"actor", a.Key(), "state", a.State, "worker", a.Worker, "snapshot_id", opts.ID)
	// Bounded: the crash paths call this too, holding the actor, and a
	// node that never answers must not hold it for good. Long enough for
	// the first call's checkpoint, which runs first, and this one.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*nodeOpTimeout)
	defer cancel()
	ref, err := on.Checkpoint(forNode(cctx, a), a.Worker, a.UID, opts)
	if err == nil && pending {
		ref, err = reportedRef(ref, a.UID)
		if err == nil && snapshot.Bare(ref) != a.PendingSnapshot {
			err = fmt.Errorf("%w: %q, asked for %s", ErrForeignSnapshot, ref, a.PendingSnapshot)
		}
	}
	switch {
	case err == nil:
	case errors.Is(err, nodeapi.ErrStale), errors.Is(err, nodeapi.ErrUnknownWorker):
		// The worker is empty: the first call's checkpoint ran (to be
		// adopted, if committed), or the sandbox died; either way it is
		// gone, and recoverLocked adopts or rolls back.
		m.log.InfoContext(ctx, "interrupted checkpoint not taken again; the sandbox is gone", "actor", a.Key(), "err", err)
		return nil, false, nil
	default:
		// Any other answer does not say the sandbox is gone (a failed
		// checkpoint empties the worker, so the next try finds it
		// stale): the actor stays as it is, on its worker.
		return nil, true, fmt.Errorf("%w: actor %s: interrupted %s not finished: %w", ErrNodeUnavailable, a.Key(), a.State, err)
	}
	out, err := m.recordCheckpoint(ctx, a, on, ref, paused, func(done *store.Actor) {
		done.Message = action.Done() + " (an interrupted " + action.String() + " was completed on its node)"
	})
	if err != nil {
		return nil, true, err
	}
	m.log.InfoContext(ctx, "interrupted checkpoint completed on its node", "actor", a.Key(), "state", out.State, "snapshot", ref)
	return out, true, nil
}

// finishUpload settles a PAUSED actor's interrupted upload (SUSPENDING,
// no worker, its paused checkpoint on a node): SUSPENDED at the durable
// copy if that was committed, else PAUSED again at the checkpoint it
// came from, which the upload does not remove until it is recorded. A
// crash there must not leave it CRASHED at its older durable snapshot:
// that would lose what it answered before the pause.
func (m *Manager) finishUpload(ctx context.Context, a *store.Actor) (*store.Actor, error) {
	if out, adopted, err := m.adoptPending(ctx, a); adopted || err != nil {
		return out, err
	}
	back := *a
	back.State, back.PendingSnapshot = store.Paused, ""
	back.Message = "paused (an interrupted upload of its checkpoint was rolled back)"
	out, err := m.update(ctx, a, &back)
	if err != nil {
		return nil, err
	}
	m.log.InfoContext(ctx, "interrupted upload rolled back: the actor is paused at its checkpoint", "actor", a.Key(), "node", a.Node, "paused_snapshot", a.PausedSnapshot)
	return out, nil
}

// adoptPending finishes the interrupted suspend of a SUSPENDING actor
// whose snapshot was committed: it becomes SUSPENDED at that snapshot
// (nothing it answered is rolled back) and its previous one is deleted.
// adopted is false when there is no such snapshot; an error (the
// snapshot store could not tell, or the write failed) leaves the actor
// as it is, for a later workflow to try again rather than roll back work
// that may be safe.
func (m *Manager) adoptPending(ctx context.Context, a *store.Actor) (_ *store.Actor, adopted bool, _ error) {
	if a.State != store.Suspending || a.PendingSnapshot == "" || !strings.HasPrefix(a.PendingSnapshot, a.UID+"/") {
		return nil, false, nil
	}
	committed, err := m.snaps.Committed(ctx, a.PendingSnapshot)
	if errors.Is(err, snapshot.ErrNotFound) {
		m.log.InfoContext(ctx, "interrupted suspend's snapshot was not committed; rolling back to the last one",
			"actor", a.Key(), "pending", a.PendingSnapshot, "last", a.Snapshot)
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("actor %s: is the interrupted suspend's snapshot %s committed? %w", a.Key(), a.PendingSnapshot, err)
	}
	n := *a
	// The pointer records the digest of the manifest found now: from here
	// on nothing else may stand in for it (snapshot.ParseRef).
	n.State, n.Worker, n.Snapshot, n.PendingSnapshot = store.Suspended, "", committed, ""
	n.PausedSnapshot, n.Node = "", "" // an upload's: its durable copy replaces it
	n.Message = "suspended (an interrupted suspend was completed from its committed snapshot)"
	out, err := m.update(ctx, a, &n)
	if err != nil {
		return nil, false, err
	}
	if a.Worker != "" {
		m.workerFreed()
	}
	if a.PausedSnapshot != "" {
		if on, ok := m.nodes.Get(a.Node); ok {
			_ = on.DeletePaused(a.PausedSnapshot)
		}
	}
	m.deleteOld(ctx, a, a.Snapshot)
	m.log.InfoContext(ctx, "interrupted suspend completed from its committed snapshot", "actor", a.Key(), "snapshot", out.Snapshot)
	return out, true, nil
}

// Recover repairs state after the API server restarted together with
// node, the one node in its process (`ate up`), before that node
// registers: every actor holding one of its workers has lost its
// sandbox, so it becomes CRASHED at its last snapshot (resumable),
// staging leftovers are removed, and unfinished golden builds start
// again. (The node's registration would find the same, but only once
// it is welcomed: see ClaimsNotHosted.) It reads the workers and templates,
// never every actor, so start-up does not grow with the number of
// actors; CollectGarbage, which does, runs afterwards while the API
// serves.
func (m *Manager) Recover(ctx context.Context, node string) error {
	if err := m.recoverWorkers(ctx, node); err != nil {
		return err
	}
	return m.RecoverStore(ctx)
}

// RecoverStore is Recover for an API server whose nodes run apart from it
// and outlive it: their actors are left as they are, to be reconciled by
// each node's registration (internal/nodeagent); it only clears snapshot
// staging and restarts unfinished golden builds. Over a shared store
// (a holder was given) other replicas' workflows may be staging
// snapshots right now, so staging is left alone.
func (m *Manager) RecoverStore(ctx context.Context) error {
	if m.holder == "" {
		if err := m.snaps.ClearStaging(); err != nil {
			return fmt.Errorf("clear snapshot staging: %w", err)
		}
	}
	return m.resumeGoldenBuilds(ctx)
}

// recoverWorkers marks every actor that holds a worker of node CRASHED
// at its last snapshot: its sandbox died with the previous process.
// Workers of other nodes (over a shared store, other `ate up`
// installations') are not ours to judge.
func (m *Manager) recoverWorkers(ctx context.Context, node string) error {
	workers, err := m.store.ListWorkers(ctx)
	if err != nil {
		return err
	}
	for _, w := range workers {
		if w.Free() || w.Node != node {
			continue
		}
		if err := m.crashHolder(ctx, w, "node restarted: memory since the last snapshot was lost"); err != nil {
			return fmt.Errorf("recover actor %s: %w", w.Actor, err)
		}
	}
	return nil
}

// SelfRequest is an actor asking, from inside its sandbox, to be
// suspended or paused. It runs the workflow in the background, on a
// goroutine the manager owns, since the caller is the actor being
// checkpointed. It acts only while the record store assigns worker to
// actorUID and the actor to worker, checked again under the actor's
// lock (Why.OnWorker): a request that arrives after the actor moved is
// dropped, not applied to the moved actor or to the worker's new one.
func (m *Manager) SelfRequest(worker, actorUID string, action checkpoint.Action) {
	m.goOwned(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, workflowTimeout)
		defer cancel()
		key, ok := m.holderOf(ctx, worker, actorUID)
		if !ok {
			m.log.Info("self-requested checkpoint refused: the worker does not host that actor now", "worker", worker, "actorUid", actorUID, "action", action)
			return
		}
		m.selfPutAway(ctx, key, worker, actorUID, action)
	})
}

// selfPutAway runs a self-requested checkpoint of key, bound to worker
// and actorUID.
func (m *Manager) selfPutAway(ctx context.Context, key names.ActorKey, worker, actorUID string, action checkpoint.Action) {
	why := Why{Reason: store.ReasonSelfRequested, OnWorker: worker, UID: actorUID}
	if _, err := m.PutAway(ctx, key, action, why); err != nil {
		m.log.Warn("self-requested checkpoint failed", "actor", key, "action", action, "err", err)
	}
}

// RequestSelfCheckpoint is SelfRequest with a verdict for the actor:
// nil when the record store assigns worker to actorUID and the actor,
// RUNNING, to worker now — the checkpoint then runs in the background,
// bound to that assignment, since the caller is the actor being
// checkpointed; nodeapi.ErrNotHosted when it does not, and nothing is
// done; the store's error (store.ErrUnavailable …) when it cannot be
// read.
func (m *Manager) RequestSelfCheckpoint(ctx context.Context, worker, actorUID string, action checkpoint.Action) error {
	w, err := m.store.GetWorker(ctx, worker)
	var act *store.Actor
	if err == nil && w.ActorUID == actorUID && actorUID != "" && !w.Actor.IsZero() {
		act, err = m.store.GetActor(ctx, w.Actor)
	}
	switch {
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("%s not requested: %w; retry later", action, err)
	case act == nil || act.UID != actorUID || act.Worker != worker || act.State != store.Running:
		return fmt.Errorf("%s refused: worker %s, actor uid %s: %w", action, worker, actorUID, nodeapi.ErrNotHosted)
	}
	key := act.Key()
	m.goOwned(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, workflowTimeout)
		defer cancel()
		m.selfPutAway(ctx, key, worker, actorUID, action)
	})
	return nil
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
// that incarnation still holds it. An actor left SUSPENDING or PAUSING
// by a workflow that died is settled instead (settleLocked): its
// checkpoint, if its node committed it, is kept.
func (m *Manager) crashHolder(ctx context.Context, w *store.Worker, why string) error {
	return m.crashHolderIf(ctx, w, why, func(*store.Actor) bool { return true })
}

// crashHolderIf is crashHolder for an actor still holding w only if
// applies(actor) says the report is newer than the actor's record.
func (m *Manager) crashHolderIf(ctx context.Context, w *store.Worker, why string, applies func(*store.Actor) bool) error {
	return m.withActor(ctx, w.Actor, func(ctx context.Context) error {
		a, err := m.leasedActor(ctx, w.Actor)
		if errors.Is(err, store.ErrNotFound) || (err == nil && (a.UID != w.ActorUID || a.Worker != w.Name)) {
			return m.store.ReleaseWorker(ctx, w.Name, w.ActorUID)
		}
		if err != nil {
			return err
		}
		if !applies(a) {
			m.log.InfoContext(ctx, "report of a lost sandbox is older than the actor's record; left as it is", "actor", a.Key(), "worker", w.Name, "state", a.State)
			return nil
		}
		// A checkpoint under way when its workflow died may have been
		// committed on a node that is still heard: finished, not
		// rolled back.
		_, err = m.settleLocked(ctx, a, why)
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
