package lifecycle

import (
	"cmp"
	"context"
	"slices"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/clock"
	"substrate.dev/ate/internal/metrics"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/streams"
)

// Eviction tuning.
const (
	// DefaultMinRun protects a just-resumed actor that has not answered a
	// request yet (EvictionPolicy.min_run_seconds unset): long enough for
	// the request that woke it to arrive over a slow client's connection.
	DefaultMinRun = 5 * time.Second
	// evictRetryAfter keeps an actor whose eviction failed from being
	// picked again at once.
	evictRetryAfter = 30 * time.Second
	// evictTimeout bounds one eviction: the victim's drain grace
	// (default 10 s, at most a day by validation, but an idle victim has
	// nothing to drain) and its checkpoint.
	evictTimeout = workflowTimeout
)

// eviction is one victim being checkpointed to make room.
type eviction struct {
	victim, forActor names.ActorKey
	worker           string
	labels           map[string]string
}

// candidate is a RUNNING actor that may be evicted now.
type candidate struct {
	actor    *store.Actor
	worker   *store.Worker
	policy   *atev1.EvictionPolicy
	streams  streams.Policy
	priority int32
	last     time.Time
	action   checkpoint.Action // the template's idle action
}

// makeRoom starts one eviction for each waiter (oldest first) that no
// eviction under way will serve: an eviction serves the first waiter
// whose selector matches the evicted worker.
func (m *Manager) makeRoom(ctx context.Context, waiting []*waiter, workers []*store.Worker) {
	m.queue.mu.Lock()
	var under []*eviction
	for _, e := range m.queue.evictions {
		under = append(under, e)
	}
	m.queue.mu.Unlock()
	var cands []candidate
	loaded := false
	for _, wt := range waiting {
		if i := slices.IndexFunc(under, func(e *eviction) bool { return store.MatchLabels(wt.selector, e.labels) }); i >= 0 {
			under = slices.Delete(under, i, i+1)
			continue
		}
		if !loaded {
			cands, loaded = m.candidates(ctx, workers), true
		}
		i := slices.IndexFunc(cands, func(c candidate) bool { return store.MatchLabels(wt.selector, c.worker.Labels) })
		if i < 0 {
			// Every matching worker is busy: the waiter parks until one
			// frees or becomes idle (the next poll looks again).
			continue
		}
		c := cands[i]
		cands = slices.Delete(cands, i, i+1)
		m.startEviction(c, wt.actor)
	}
}

// candidates returns the RUNNING actors on live nodes' workers that may
// be evicted now, best victim first: lowest template priority (clamped to
// the atespace's ceiling, EvictionLimits), then least recently active. An
// actor is left out when its template says evictable: false (unless its
// atespace pins more actors than its cap allows: the least recently
// active beyond the cap are not protected), a request is in flight to it (streams count unless
// the template allows them), it resumed less than its minimum run time ago
// and has answered no request since, its last eviction failed less than
// evictRetryAfter ago, or it is being evicted.
func (m *Manager) candidates(ctx context.Context, workers []*store.Worker) []candidate {
	now := clock.Now()
	var out []candidate
	// Templates are immutable and most running actors share a few: one
	// read each per round.
	tpls := map[[2]string]*store.Template{}
	// pins are the pinned actors of atespaces with a cap on them.
	pins := map[string][]pinnedActor{}
	for _, w := range workers {
		if w.Free() || m.evictingOrFailed(w.Actor, now) {
			continue
		}
		n, ok := m.nodes.Get(w.Node)
		if !ok {
			continue
		}
		act, ok := n.WorkerActivity(w.Name)
		if !ok || act.ActorUID != w.ActorUID {
			continue
		}
		a, err := m.store.GetActor(ctx, w.Actor)
		if err != nil || a.UID != w.ActorUID || a.State != store.Running || a.Worker != w.Name {
			continue
		}
		tk := [2]string{a.Atespace, a.Template}
		tpl, ok := tpls[tk]
		if !ok {
			if tpl, err = m.store.GetTemplate(ctx, a.Atespace, a.Template); err != nil {
				continue
			}
			tpls[tk] = tpl
		}
		sp := streamPolicy(tpl.Spec)
		pol := tpl.Spec.GetEviction()
		c := candidate{actor: a, worker: w, policy: pol, streams: sp, priority: m.evictLimits.priority(a.Atespace, pol),
			last: act.Last, action: idleAction(tpl.Spec)}
		if _, capped := m.evictLimits.MaxPinned.For(a.Atespace); capped && (pinned(pol) || heldByMinRun(pol, act, now)) {
			// Counted whether or not it could go now: every pinned
			// actor holds its worker.
			pins[a.Atespace] = append(pins[a.Atespace], pinnedActor{c: c, eligible: evictable(unpinned(pol), sp, act, now)})
			continue
		}
		if !evictable(pol, sp, act, now) {
			continue
		}
		out = append(out, c)
	}
	for atespace, ps := range pins {
		max, _ := m.evictLimits.MaxPinned.For(atespace)
		out = append(out, overPinCap(ps, max)...)
	}
	slices.SortFunc(out, func(x, y candidate) int {
		return cmp.Or(cmp.Compare(x.priority, y.priority), x.last.Compare(y.last), cmp.Compare(x.actor.Key().String(), y.actor.Key().String()))
	})
	return out
}

// evictable applies p's rules, and sp's to listening streams, to what
// the tunnel saw of the actor.
func evictable(p *atev1.EvictionPolicy, sp streams.Policy, act nodeapi.Activity, now time.Time) bool {
	if p != nil && p.Evictable != nil && !p.GetEvictable() {
		return false
	}
	if busy := sp.Busy(act.InFlight, act.Listeners); busy > 0 && !(p.GetAllowOpenStreams() && act.InFlight == act.Streams) {
		return false
	}
	minRun := DefaultMinRun
	if p != nil && p.MinRunSeconds != nil {
		minRun = time.Duration(p.GetMinRunSeconds()) * time.Second
	}
	return act.Served > 0 || now.Sub(act.Started) >= minRun
}

// idleAction is spec's idle action, which eviction uses too: suspend
// when there is none (checkpoint.ParseAction) or, since the API validated
// it, when it cannot be read.
func idleAction(spec *atev1.ActorTemplateSpec) checkpoint.Action {
	a, _ := checkpoint.ParseAction(spec.GetIdle().GetAction())
	return a
}

// streamPolicy is spec's stream policy; the defaults when it has none
// or, since the API validated it, when it cannot be read.
func streamPolicy(spec *atev1.ActorTemplateSpec) streams.Policy {
	p, _ := streams.Parse(spec.GetStreams().GetIdle(), spec.GetStreams().GetWakeOn())
	return p
}

func (m *Manager) evictingOrFailed(actor names.ActorKey, now time.Time) bool {
	m.queue.mu.Lock()
	defer m.queue.mu.Unlock()
	if _, ok := m.queue.evictions[actor]; ok {
		return true
	}
	t, ok := m.queue.failed[actor]
	if ok && now.Sub(t) >= evictRetryAfter {
		delete(m.queue.failed, actor)
		return false
	}
	return ok
}

// startEviction checkpoints c's actor in the background to free its
// worker for forActor's resume.
func (m *Manager) startEviction(c candidate, forActor names.ActorKey) {
	key := c.actor.Key()
	e := &eviction{victim: key, worker: c.worker.Name, forActor: forActor, labels: c.worker.Labels}
	q := &m.queue
	q.mu.Lock()
	if q.evictions == nil {
		q.evictions, q.byWorker, q.failed = map[names.ActorKey]*eviction{}, map[string]names.ActorKey{}, map[names.ActorKey]time.Time{}
	}
	q.evictions[key] = e
	// Set before the worker frees, so the dispatcher that hands it on
	// knows which eviction freed it.
	q.byWorker[e.worker] = key
	q.mu.Unlock()
	m.log.Info("evicting idle actor to make room", "actor", key,
		"worker", e.worker, "for", forActor, "lastActivity", c.last, "action", c.action)
	m.goOwned(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, evictTimeout)
		defer cancel()
		start := time.Now()
		done, err := m.evict(ctx, c, forActor)
		q.mu.Lock()
		delete(q.evictions, key)
		if !done {
			delete(q.byWorker, e.worker)
		}
		if err != nil {
			q.failed[key] = time.Now()
		}
		q.mu.Unlock()
		switch {
		case err != nil:
			m.metrics.Eviction(metrics.OutcomeFailed)
		case done:
			m.metrics.Eviction(metrics.OutcomeOK)
		default:
			m.metrics.Eviction(metrics.OutcomeSkipped)
		}
		switch {
		case err != nil:
			m.log.Warn("eviction failed", "actor", key, "for", forActor, "err", err)
		case done:
			m.log.Info("actor evicted", "actor", key, "worker", e.worker,
				"for", forActor, "duration", time.Since(start))
		}
		m.kick()
	})
}

// evict checkpoints c's actor if it is still the RUNNING incarnation seen,
// still idle and no workflow holds it. done reports whether its worker
// was freed (by the checkpoint, or by a failed one that left the actor
// CRASHED); err is a failure worth not retrying at once.
func (m *Manager) evict(ctx context.Context, c candidate, forActor names.ActorKey) (done bool, err error) {
	why := Why{Reason: store.ReasonEvicted, EvictedFor: forActor}
	unlock, ok := m.locks.tryLock(c.actor.Key())
	if !ok {
		// A workflow (a resume, suspend or another eviction) has it: it
		// is not idle in the sense that matters.
		return false, nil
	}
	defer unlock()
	err = m.leased(ctx, c.actor.Key(), func(ctx context.Context) error {
		a, err := m.leasedActor(ctx, c.actor.Key())
		if err != nil {
			return err
		}
		if !m.queue.wanted(c.worker.Labels) {
			// The waiters it was for gave up meanwhile: keep the actor.
			return nil
		}
		var act nodeapi.Activity
		n, ok := m.nodes.Get(c.worker.Node)
		if ok {
			act, ok = n.WorkerActivity(c.worker.Name)
		}
		if a.UID != c.actor.UID || a.State != store.Running || a.Worker != c.worker.Name || !ok ||
			act.ActorUID != a.UID || !evictable(c.policy, c.streams, act, clock.Now()) {
			// A request slipped in, or the actor moved: leave it.
			return nil
		}
		done = true
		_, err = m.checkpointLocked(ctx, a, c.action, why)
		return err
	})
	return done, err
}
