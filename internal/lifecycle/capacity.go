package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
)

// Capacity: workers are a cache of running actors. A resume that finds no
// free worker joins a queue in arrival order; every worker freed goes to
// the oldest waiter whose worker selector it matches, and while waiters
// remain unserved the manager makes room by evicting idle actors
// (evict.go). A resume never claims past an older waiter: only a resume
// that finds the queue empty claims directly, so no request waits while
// later ones for other actors are served ahead of it.
//
// The queue is this API server's: with several replicas over one store
// each orders its own waiters, and workers freed by another replica are
// found by the poll (claimPoll).

// waiter is one resume waiting for a worker.
type waiter struct {
	seq      uint64
	actor    names.ActorKey
	selector map[string]string
	// grants receives the worker handed to this waiter; buffered so the
	// dispatcher never blocks. granted is the worker of an unconsumed
	// grant ("" when none); guarded by queue.mu.
	grants  chan grant
	granted string
	served  bool
}

// grant hands a free worker to a waiter, naming the actor whose eviction
// freed it (zero when none did).
type grant struct {
	worker  string
	evicted names.ActorKey
}

// queue is the manager's capacity queue. The zero value is ready.
type queue struct {
	mu      sync.Mutex
	seq     uint64
	waiters []*waiter // arrival order
	// evictions are the evictions under way (evict.go); byWorker names,
	// for a worker an eviction freed or is freeing, the evicted actor,
	// until the worker is handed on.
	evictions map[names.ActorKey]*eviction // by victim
	byWorker  map[string]names.ActorKey
	// failed holds when an eviction of an actor last failed; such an
	// actor is not picked again before evictRetryAfter.
	failed map[names.ActorKey]time.Time
	// left keeps the place of a waiter that gave up (its caller's
	// deadline) for rejoinWindow, so a caller retrying at once — the
	// router, whose shared resume ran out of time while its requests
	// still have budget — keeps its place in line.
	left map[names.ActorKey]leftPlace
	// dispatching is set while a dispatch loop runs; again asks it for
	// one more round, and wake ends its wait between rounds.
	dispatching, again bool
	wake               chan struct{}
}

type leftPlace struct {
	seq uint64
	at  time.Time
}

// rejoinWindow is how long a departed waiter's place is kept.
const rejoinWindow = 2 * time.Second

// busy reports whether any resume is queued.
func (q *queue) busy() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiters) > 0
}

// join queues a waiter for actor, at the place it held if it left less
// than rejoinWindow ago.
func (q *queue) join(actor names.ActorKey, selector map[string]string) *waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	w := &waiter{actor: actor, selector: selector, grants: make(chan grant, 1)}
	if p, ok := q.left[actor]; ok && time.Since(p.at) < rejoinWindow {
		w.seq = p.seq
		delete(q.left, actor)
	} else {
		q.seq++
		w.seq = q.seq
	}
	i := len(q.waiters)
	for i > 0 && q.waiters[i-1].seq > w.seq {
		i--
	}
	q.waiters = append(q.waiters, nil)
	copy(q.waiters[i+1:], q.waiters[i:])
	q.waiters[i] = w
	return w
}

// leave removes w; an unserved waiter's place is kept for rejoinWindow.
func (q *queue) leave(w *waiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, x := range q.waiters {
		if x == w {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			break
		}
	}
	w.granted = ""
	if w.served {
		return
	}
	if q.left == nil {
		q.left = map[names.ActorKey]leftPlace{}
	}
	now := time.Now()
	for k, p := range q.left {
		if now.Sub(p.at) >= rejoinWindow {
			delete(q.left, k)
		}
	}
	q.left[w.actor] = leftPlace{seq: w.seq, at: now}
}

// consumed records that w acted on its grant of worker: claimed it
// (served) or found it gone.
func (q *queue) consumed(w *waiter, served bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w.granted, w.served = "", served
}

// unserved returns the waiters without a pending grant, oldest first, and
// the workers granted but not yet claimed.
func (q *queue) unserved() ([]*waiter, map[string]bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []*waiter
	pending := map[string]bool{}
	for _, w := range q.waiters {
		if w.granted != "" {
			pending[w.granted] = true
			continue
		}
		out = append(out, w)
	}
	return out, pending
}

// hand grants worker to w unless w left or holds a grant meanwhile.
func (q *queue) hand(w *waiter, worker string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.granted != "" || !q.queued(w) {
		return false
	}
	w.granted = worker
	evicted := q.byWorker[worker]
	delete(q.byWorker, worker)
	w.grants <- grant{worker: worker, evicted: evicted}
	return true
}

// wanted reports whether a waiter without a grant could use a worker
// with labels.
func (q *queue) wanted(labels map[string]string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, w := range q.waiters {
		if w.granted == "" && store.MatchLabels(w.selector, labels) {
			return true
		}
	}
	return false
}

func (q *queue) queued(w *waiter) bool {
	for _, x := range q.waiters {
		if x == w {
			return true
		}
	}
	return false
}

// kick makes the dispatcher look at the queue and the free workers again:
// now, or right after the round it is in.
func (m *Manager) kick() {
	q := &m.queue
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dispatching {
		q.again = true
		select {
		case q.wake <- struct{}{}:
		default:
		}
		return
	}
	if len(q.waiters) == 0 {
		return
	}
	q.dispatching = true
	if q.wake == nil {
		q.wake = make(chan struct{}, 1)
	}
	m.goOwned(m.dispatchLoop)
}

// dispatchLoop runs dispatch rounds while resumes wait: at once when
// kicked, else every claimPoll — the one poll for all waiters, which
// notices workers another replica freed and victims that became idle or
// passed their minimum run time. It ends when the queue is empty.
func (m *Manager) dispatchLoop(ctx context.Context) {
	q := &m.queue
	poll := time.NewTimer(claimPoll)
	defer poll.Stop()
	for {
		m.dispatch(ctx)
		q.mu.Lock()
		switch {
		case ctx.Err() != nil || len(q.waiters) == 0:
			q.dispatching, q.again = false, false
			q.mu.Unlock()
			return
		case q.again:
			q.again = false
			q.mu.Unlock()
			continue
		}
		q.mu.Unlock()
		poll.Reset(claimPoll)
		select {
		case <-ctx.Done():
		case <-q.wake:
		case <-poll.C:
		}
	}
}

// WorkerIdle is the node's report that the actor on worker has no request
// in flight any more: if resumes are waiting, it may be the victim that
// makes room for them now rather than at the next poll.
func (m *Manager) WorkerIdle(string) { m.kick() }

// dispatchTimeout bounds one dispatch round's store reads.
const dispatchTimeout = 10 * time.Second

// dispatch hands each free worker to the oldest unserved waiter it
// matches and starts evictions for the waiters still unserved.
func (m *Manager) dispatch(ctx context.Context) {
	waiting, pending := m.queue.unserved()
	if len(waiting) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, dispatchTimeout)
	defer cancel()
	workers, err := m.store.ListWorkers(ctx)
	if err != nil {
		m.log.WarnContext(ctx, "capacity: list workers", "err", err)
		return
	}
	// Only nodes that take new actors (live, not draining) get claims.
	placeable := m.nodes.ByLoad()
	for _, w := range workers {
		if !w.Free() || pending[w.Name] || !slices.Contains(placeable, w.Node) {
			continue
		}
		for i, wt := range waiting {
			if store.MatchLabels(wt.selector, w.Labels) {
				if m.queue.hand(wt, w.Name) {
					waiting = append(waiting[:i], waiting[i+1:]...)
				}
				break
			}
		}
	}
	if len(waiting) > 0 {
		m.makeRoom(ctx, waiting, workers)
	}
}

// claim takes a free worker for a, moving it to RESUMING, and queues for
// one while none is free (capacity, above). A worker on prefer (if set)
// wins; another node's is taken only when prefer has none free. Among the
// free, the workers in ready (holding a standby for a's template) go
// first. evicted is the actor whose eviction freed the worker, if any.
func (m *Manager) claim(ctx context.Context, a *store.Actor, prefer string, ready []string) (_ *store.Actor, _ *store.Worker, evicted names.ActorKey, _ error) {
	if !m.queue.busy() {
		ra, w, err := m.tryClaim(ctx, a, prefer, ready)
		if !errors.Is(err, store.ErrNoFreeWorker) {
			return ra, w, names.ActorKey{}, err
		}
	}
	wt := m.queue.join(a.Key(), a.WorkerSelector)
	m.metrics.Waiters(1)
	defer m.metrics.Waiters(-1)
	defer func() {
		m.queue.leave(wt)
		// A grant this waiter did not use goes to the next one.
		m.kick()
	}()
	m.log.InfoContext(ctx, "waiting for a free worker", "actor", a.Key(), "prefer", prefer)
	m.kick()
	for {
		select {
		case <-ctx.Done():
			return nil, nil, names.ActorKey{}, fmt.Errorf("%w for actor %s before the deadline: %w", ErrNoCapacity, a.Key(), ctx.Err())
		case g := <-wt.grants:
			ra, w, err := m.tryClaim(ctx, a, prefer, append([]string{g.worker}, ready...))
			m.queue.consumed(wt, err == nil)
			if err == nil {
				if w.Name != g.worker {
					g.evicted = names.ActorKey{}
				}
				return ra, w, g.evicted, nil
			}
			if !errors.Is(err, store.ErrNoFreeWorker) {
				return nil, nil, names.ActorKey{}, err
			}
			m.kick()
		}
	}
}

// tryClaim claims a free worker once: on prefer if it has one, else on
// the least loaded live node that has one (placement spreads actors
// across nodes; within a node, workers holding a standby for the
// template come first). Workers of nodes that are not live are never
// claimed, so a resume never lands on a node that cannot start it.
func (m *Manager) tryClaim(ctx context.Context, a *store.Actor, prefer string, ready []string) (*store.Actor, *store.Worker, error) {
	order := slices.DeleteFunc(slices.Clone(m.nodes.ByLoad()), m.refusing) // reordered below; not ours to change
	if i := slices.Index(order, prefer); i > 0 {
		order = slices.Insert(slices.Delete(order, i, i+1), 0, prefer)
	}
	for _, n := range order {
		base, ra, w, err := m.claimOn(ctx, a, n, ready)
		if err == nil {
			m.recordChange(base, ra)
		}
		if !errors.Is(err, store.ErrNoFreeWorker) {
			return ra, w, err
		}
		a = base
	}
	return nil, nil, fmt.Errorf("actor %s: %w on any live node", a.Key(), store.ErrNoFreeWorker)
}

// defaultNotServingFor is how long placement passes over a node that
// refused a start as not serving (nodeapi.ErrNotServing) before trying
// it again (Manager.notServingFor): about the interval at which replicas
// renew a node's lease, so a node whose renewal was merely late is back
// soon, and one that stays out costs one refused start a second.
const defaultNotServingFor = time.Second

// notServing records that node refused a start as not serving.
func (m *Manager) notServing(node string) {
	m.refusedMu.Lock()
	defer m.refusedMu.Unlock()
	if m.refused == nil {
		m.refused = map[string]time.Time{}
	}
	m.refused[node] = time.Now().Add(cmp.Or(m.notServingFor, defaultNotServingFor))
}

// refusing reports whether node refused a start as not serving within
// the last notServingFor.
func (m *Manager) refusing(node string) bool {
	m.refusedMu.Lock()
	defer m.refusedMu.Unlock()
	until, ok := m.refused[node]
	if ok && !time.Now().Before(until) {
		delete(m.refused, node)
		return false
	}
	return ok
}

// claimOn is store.ClaimWorker on node n, retried, as update retries,
// when the record changed only in fields the workflows do not own: a
// resume that waited for a worker while the router recorded the actor's
// last activity, or a client set a new worker selector (read again here),
// must not fail with a conflict — that failure handed its worker, and
// the eviction that freed it, to nobody. base is the record the claim
// was made on.
func (m *Manager) claimOn(ctx context.Context, a *store.Actor, n string, ready []string) (base, _ *store.Actor, _ *store.Worker, _ error) {
	var ra *store.Actor
	var w *store.Worker
	base, err := m.onFreshRecord(ctx, a, func(a *store.Actor) (err error) {
		ra, w, err = m.store.ClaimWorker(ctx, a, n, ready...)
		return err
	})
	if err != nil {
		return base, nil, nil, err
	}
	return base, ra, w, nil
}

// onFreshRecord runs write, a compare-and-set on a's version, and when it
// fails with store.ErrConflict because the record changed only in fields
// the workflows do not own (the router's last activity, a new worker
// selector), runs it again on the stored record, up to five times more;
// a change of the lifecycle fields is a real conflict and is returned. It
// returns the record write last ran on.
func (m *Manager) onFreshRecord(ctx context.Context, a *store.Actor, write func(*store.Actor) error) (*store.Actor, error) {
	for attempt := 0; ; attempt++ {
		err := write(a)
		if !errors.Is(err, store.ErrConflict) || attempt == 5 {
			return a, err
		}
		cur, gerr := m.store.GetActor(ctx, a.Key())
		if gerr != nil || !sameLifecycle(cur, a) {
			return a, err
		}
		m.metrics.CASRetry()
		a = cur
	}
}
