package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"substrate.dev/ate/internal/activation"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/coalesce"
	"substrate.dev/ate/internal/metrics"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/tracing"
)

// activated is how one request got its actor, for the activation headers.
type activated struct {
	// how is sent to the client in the Ate-Activation response header.
	how activation.Kind
	// waited is how long the request was parked; 0 when warm.
	waited time.Duration
	// evicted is the actor the resume checkpointed to free a worker;
	// zero when none was.
	evicted names.ActorKey
	// subject is who the request's bearer token names, when the actor's
	// ingress policy asked for one (HeaderIngressSubject).
	subject string
}

// header is the Ate-Activation value (see HeaderActivation): the
// activation, with the RFC 8941 boolean parameter "evicted" if the
// resume evicted an actor. Never the evicted actor's name: the client is
// anyone who reaches the router, and the actor may be another tenant's.
func (a activated) header() string {
	if a.evicted.IsZero() {
		return a.how.String()
	}
	return a.how.String() + ";evicted"
}

// Tuning of the park loop.
const (
	// assignedCheckTimeout bounds the one control-plane read made when a
	// request's budget runs out; it is a store read.
	assignedCheckTimeout = 2 * time.Second
	// parkRetryBackoff spaces new shared calls after one ran out of its
	// own time while this request still had budget, so a control plane
	// that answers "no capacity" at once is not hammered.
	parkRetryBackoff = 50 * time.Millisecond
)

// activator turns an actor key into a RUNNING target: from its table, or by
// a Lookup and, when the actor is not running, a Resume. Lookup and Resume
// are coalesced per actor, and requests waiting for them are "parked":
// bounded in number (parkMax, across all actors) and in time (budget, plus
// grace when the actor already has a worker as the budget runs out).
//
// The same table counts the requests being proxied to each actor and when
// it last saw traffic; idle.go acts on that. Keeping both under one mutex
// makes "take the cached target and count the request" atomic with "the
// actor is idle: drop its target and put it away".
//
// An activator is safe for concurrent use.
type activator struct {
	res Resolver
	// guard checks requests against actors' ingress policies (ingress.go).
	guard   *ingressGuard
	logger  *slog.Logger
	metrics *metrics.Router
	budget  time.Duration
	grace   time.Duration
	parkMax int64
	// parked counts requests admitted to wait for a resolution; it never
	// exceeds parkMax.
	parked atomic.Int64
	// flights runs one Lookup(+Resume) per actor at a time; checks one
	// Assigned per actor. Both keyed by ActorKey.String().
	flights coalesce.Group
	checks  coalesce.Group
	// looks runs one Lookup per actor at a time for held listening
	// streams (hold.go).
	looks coalesce.Group
	// down are the tunnel addresses that refused connections
	// (unreachable.go).
	down downTunnels
	// draining is closed, once (drainOnce), when the router drains: held
	// listening streams are then answered (errHeldDrain).
	draining  chan struct{}
	drainOnce sync.Once

	mu sync.Mutex
	// actors is what the router knows per actor; guarded by mu, as are
	// the fields of its entries. An entry lives while it has a target, a
	// request, an idle action in progress or unreported activity (a few
	// hundred bytes each).
	actors map[names.ActorKey]*actorState
}

// actorState is one actor's entry in the activator's table.
type actorState struct {
	// target is the last RUNNING target seen; the zero Target when none
	// is cached. It is dropped when a tunnel rejects it or cannot be
	// reached, so a stale one costs one failed attempt.
	target Target
	// open counts requests being proxied to the actor, streams and
	// WebSockets included; listens those of them that are listening
	// streams (streams.IsListen).
	open, listens int
	// held counts listening streams waiting, without resuming the actor,
	// for it to run (hold.go); woken, when not nil, is closed (and
	// cleared) by the next store of a target, which they wait for.
	held  int
	woken chan struct{}
	// last is when a request to the actor last started or ended, or its
	// target was stored; reported is the last activity sent to the
	// control plane.
	last, reported time.Time
	// away is non-nil while this router pauses or suspends the actor, and
	// closed when that call returns; resolutions wait for it.
	away chan struct{}
	// resolving is set while a shared Lookup(+Resume) of the actor runs.
	resolving bool
}

func newActivator(res Resolver, cfg Config, logger *slog.Logger) *activator {
	return &activator{
		res:      res,
		guard:    newIngressGuard(reviewerOf(res), cfg),
		logger:   logger,
		metrics:  cfg.Metrics,
		budget:   cfg.ParkBudget,
		grace:    cfg.ParkGrace,
		parkMax:  int64(cfg.ParkMax),
		flights:  coalesce.Group{Timeout: cfg.ParkBudget},
		checks:   coalesce.Group{Timeout: assignedCheckTimeout},
		looks:    coalesce.Group{Timeout: holdLookupTimeout},
		draining: make(chan struct{}),
		actors:   make(map[names.ActorKey]*actorState),
		down:     downTunnels{probe: tunnelProbe(cfg.TunnelTLS != nil)},
	}
}

// resolution is the result of one shared Lookup(+Resume).
type resolution struct {
	target  Target
	resumed bool
	// evicted is Resumption.Evicted of the Resume; zero without one.
	evicted names.ActorKey
}

// target returns key's RUNNING target and how this request got it (how
// long it waited, whether an actor was evicted for it), and counts the
// request as open on the actor: the caller must call done(key, listen)
// when it ends. A listening stream (listen) to an actor whose policy says
// wakeOn: request is held until the actor runs (hold). The request's
// credentials (cred) are checked against the actor's ingress policy
// before it is counted, held or parked, and before a resume it leads
// (ingress.go). Errors are the Resolver's (wrapped), an *ingressRefusal,
// errParkFull, errParkBudget, errParkGrace, errHeldDrain, or the cause
// of ctx ending.
func (a *activator) target(ctx context.Context, key names.ActorKey, listen bool, cred credentials) (Target, activated, error) {
	t, ok, rv, err := a.acquireAdmitted(ctx, key, listen, cred)
	if err != nil {
		return Target{}, activated{}, err
	}
	if ok {
		return t, activated{how: activation.Warm, subject: rv.Subject}, nil
	}
	if listen {
		t, act, held, err := a.hold(ctx, key, cred)
		if err != nil || held {
			return t, act, err
		}
		// The actor's policy lets any request wake it: park as usual.
	}
	t, ok, rv, pre, err := a.admitCold(ctx, key, listen, cred)
	if err != nil || ok {
		return t, activated{how: activation.Warm, subject: rv.Subject}, err
	}
	n, ok := a.admit()
	if !ok {
		return Target{}, activated{}, fmt.Errorf("park request for %s: %w", key, errParkFull)
	}
	defer a.parked.Add(-1)
	a.metrics.Parked(1)
	defer a.metrics.Parked(-1)
	a.logger.Debug("request parked", "actor", key, "parked", n)
	start := time.Now()
	ctx, span := tracing.Span(ctx, "router.park", attribute.String("ate.actor", key.String()))
	r, leader, err := a.park(ctx, key, cred, pre)
	if err == nil {
		// Joined requests, and the leader of a Lookup that found the
		// actor RUNNING, were not checked on the policy it returned.
		rv, err = cred.check(ctx, r.target.Policy)
	}
	tracing.End(span, err)
	if err != nil {
		a.metrics.ParkOutcome(parkOutcome(err))
		return Target{}, activated{waited: time.Since(start)}, fmt.Errorf("wait for %s: %w", key, err)
	}
	a.acquire(key, listen)
	act := activated{how: activation.Joined, waited: time.Since(start), evicted: r.evicted, subject: rv.Subject}
	switch {
	case !r.resumed:
		act.how = activation.Warm
	case leader:
		act.how = activation.Resumed
	}
	a.metrics.ParkActivated(act.how)
	if act.how != activation.Warm {
		a.metrics.ActivationWait(act.how, act.waited)
	}
	return r.target, act, nil
}

// parkOutcome is the ate_router_park_outcomes_total outcome of a park
// that ended in err.
func parkOutcome(err error) string {
	switch {
	case errors.Is(err, errParkBudget):
		return metrics.ParkBudget
	case errors.Is(err, errParkGrace):
		return metrics.ParkGrace
	case errors.Is(err, context.Canceled):
		return metrics.ParkClientGone
	default:
		return metrics.ParkFailed
	}
}

// park waits for the shared resolution of key for up to the budget, then,
// if the actor has a worker by then, for up to the grace.
func (a *activator) park(ctx context.Context, key names.ActorKey, cred credentials, pre *lookup) (resolution, bool, error) {
	r, leader, err := a.wait(ctx, key, a.budget, errParkBudget, cred, pre)
	if !errors.Is(err, errParkBudget) || ctx.Err() != nil || !a.assigned(ctx, key) {
		return r, leader, err
	}
	// The budget ran out while the actor is being restored on a worker:
	// finishing costs less than failing and starting over.
	return a.wait(ctx, key, a.grace, errParkGrace, cred, nil)
}

// wait waits up to d for the shared resolution of key. The shared call's
// deadline is the budget of the request that started it, so an attempt
// that failed only for want of time or over a concurrent change (see
// retryable) is started again while this request still has time, as is
// one its leader's credentials failed when this request's (cred) pass.
// When d runs out the error is cause (its message naming the last
// attempt's error, if one failed); when ctx ends, ctx's cause; otherwise
// the shared call's error. pre, when not nil, is a Lookup this request
// made just before (admitCold): the first call it leads uses it instead
// of looking up again.
func (a *activator) wait(ctx context.Context, key names.ActorKey, d time.Duration, cause error, cred credentials, pre *lookup) (resolution, bool, error) {
	wctx, cancel := context.WithTimeoutCause(ctx, d, cause)
	defer cancel()
	var last error
	for {
		first := pre
		pre = nil
		v, leader, err := a.flights.Do(wctx, key.String(), func(ctx context.Context) (any, error) {
			return a.lookupOrResume(ctx, key, cred, first)
		})
		if err == nil {
			return v.(resolution), leader, nil
		}
		var refused *ingressRefusal
		if !leader && wctx.Err() == nil && errors.As(err, &refused) {
			// Another request led the call, and its credentials were
			// refused: this one's may do.
			if _, err := cred.check(wctx, refused.policy); err != nil {
				return resolution{}, false, err
			}
			continue
		}
		if wctx.Err() == nil {
			if !retryable(err) {
				return resolution{}, false, err
			}
			a.logger.Debug("shared resume attempt failed, trying again", "actor", key, "err", err)
			last = err
			backoff := parkRetryBackoff
			if errors.Is(err, errNodeUnreachable) {
				backoff = unreachableRetry
			}
			if sleepCtx(wctx, backoff) == nil {
				continue
			}
		}
		if ended := context.Cause(wctx); !errors.Is(ended, cause) || last == nil {
			return resolution{}, false, ended
		}
		// %v, not %w: the last attempt's codes must not change how
		// running out of budget is answered (classify), only what the
		// log says about why. An unreachable node is named, for the
		// client to hear why nothing moved.
		if errors.Is(last, errNodeUnreachable) {
			return resolution{}, false, fmt.Errorf("%w: %w (last attempt: %v)", cause, errNodeUnreachable, last)
		}
		return resolution{}, false, fmt.Errorf("%w (last attempt: %v)", cause, last)
	}
}

// sleepCtx waits for d or until ctx ends (returning its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// assigned asks, once per actor however many requests' budgets run out
// together, whether the actor has a worker. A failed check counts as no.
func (a *activator) assigned(ctx context.Context, key names.ActorKey) bool {
	v, _, err := a.checks.Do(ctx, key.String(), func(ctx context.Context) (any, error) {
		return a.res.Assigned(ctx, key)
	})
	if err != nil {
		a.logger.Debug("assignment check failed", "actor", key, "err", err)
		return false
	}
	return v.(bool)
}

// prewarm starts resolving key in the background (or leaves a running
// resolution alone) without parking anyone: a client told to retry then
// finds its actor running. ctx only lends its values.
func (a *activator) prewarm(ctx context.Context, key names.ActorKey, cred credentials) {
	a.flights.Start(ctx, key.String(), func(ctx context.Context) (any, error) {
		r, err := a.lookupOrResume(ctx, key, cred, nil)
		if err != nil {
			// Nobody waits for this call; its error ends here.
			a.logger.Warn("background resume failed", "actor", key, "err", err)
		}
		return r, err
	})
}

// admit reserves a parking slot unless parkMax are taken, and returns
// how many are taken with it.
func (a *activator) admit() (int64, bool) {
	for {
		n := a.parked.Load()
		if n >= a.parkMax {
			return n, false
		}
		if a.parked.CompareAndSwap(n, n+1) {
			return n + 1, true
		}
	}
}

// lookupOrResume is the shared call: it runs once per actor at a time,
// with a context detached from any one request. It first lets this
// router's own pause or suspend of the actor finish, so the Lookup does
// not find it RUNNING just before its worker goes. It resumes the actor
// only if the credentials of the request that leads it (cred) pass the
// ingress policy the Lookup returned: else an *ingressRefusal. A
// Lookup the leader made just before (pre, not RUNNING) stands in for
// its own.
func (a *activator) lookupOrResume(ctx context.Context, key names.ActorKey, cred credentials, pre *lookup) (resolution, error) {
	away := a.resolving(key, true)
	defer a.resolving(key, false)
	if away != nil {
		select {
		case <-away:
		case <-ctx.Done():
			return resolution{}, context.Cause(ctx)
		}
	}
	var (
		t       Target
		running bool
		err     error
	)
	if pre != nil && away == nil {
		t, running = pre.target, pre.running
	} else {
		if t, running, err = a.res.Lookup(ctx, key); err != nil {
			return resolution{}, fmt.Errorf("look up %s: %w", key, err)
		}
		a.guard.remember(key, t.Policy)
	}
	if running {
		// Still placed where a connection failed: wait (the caller
		// retries) for the control plane to move it, or the node to
		// answer again.
		if err := a.down.check(ctx, t); err != nil {
			// The worker's node may be back at another address
			// (restarted): the next look lists the workers again.
			a.tunnelGone(t)
			return resolution{}, fmt.Errorf("%s: %w", key, err)
		}
	}
	var rs Resumption
	if !running {
		if _, err := cred.check(ctx, t.Policy); err != nil {
			return resolution{}, fmt.Errorf("resume %s: %w", key, err)
		}
		start := time.Now()
		t, rs, err = a.res.Resume(ctx, key)
		if err != nil {
			return resolution{}, fmt.Errorf("resume %s: %w", key, err)
		}
		attrs := []any{"actor", key, "worker", t.Worker, "duration", time.Since(start)}
		if rs.Evicted != (names.ActorKey{}) {
			attrs = append(attrs, "evicted", rs.Evicted.String())
		}
		a.logger.Info("actor resumed", attrs...)
	}
	a.store(key, t)
	return resolution{target: t, resumed: !running, evicted: rs.Evicted}, nil
}

// entry returns key's entry, creating it. a.mu must be held.
func (a *activator) entry(key names.ActorKey) *actorState {
	st, ok := a.actors[key]
	if !ok {
		st = &actorState{}
		a.actors[key] = st
	}
	return st
}

// store records t as key's RUNNING target. A target just stored counts as
// activity, so an actor is never put away the moment it came up.
func (a *activator) store(key names.ActorKey, t Target) {
	a.guard.remember(key, t.Policy)
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.entry(key)
	st.target, st.last = t, time.Now()
	if st.woken != nil {
		close(st.woken)
		st.woken = nil
	}
}

// acquireCached returns key's cached target and counts a request (a
// listening stream if listen) open on it, or reports false when there is
// none (t zero). When the target's ingress policy is not public and the
// request's credentials were not checked (cleared), nothing is counted:
// it returns the target with false, for acquireAdmitted to check them.
func (a *activator) acquireCached(key names.ActorKey, listen, cleared bool) (Target, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st, ok := a.actors[key]
	if !ok || st.target == (Target{}) {
		return Target{}, false
	}
	if a.down.marked(st.target.TunnelAddr) {
		// Another request's connection to it failed: park instead.
		st.target = Target{}
		return Target{}, false
	}
	if !cleared && st.target.Policy.Ingress != auth.IngressPublic {
		return st.target, false
	}
	st.opened(listen)
	return st.target, true
}

// acquireAdmitted is acquireCached for a request with credentials cred:
// against a cached target whose ingress policy asks for a token, they
// are checked first (an error then, nothing counted). ok is false when
// there is no cached target; rv is the review of cred's token, if one
// was needed.
func (a *activator) acquireAdmitted(ctx context.Context, key names.ActorKey, listen bool, cred credentials) (t Target, ok bool, rv IngressReview, err error) {
	t, ok = a.acquireCached(key, listen, false)
	if ok || t == (Target{}) {
		return t, ok, IngressReview{}, nil
	}
	if rv, err = cred.check(ctx, t.Policy); err != nil {
		return Target{}, false, IngressReview{}, err
	}
	// The one policy that asks for credentials has passed; whatever
	// target is cached now, its actor is of the same atespace.
	t, ok = a.acquireCached(key, listen, true)
	return t, ok, rv, nil
}

// admitCold checks a request for key, which has no cached target,
// against the actor's ingress policy before it may park: the policy
// remembered from the last Lookup or resume within the guard's TTL, or
// else one looked up now (one at a time per actor, admissionLookup; without a
// parking slot). A RUNNING actor that look finds is stored and acquired
// as if it had been cached (ok). Refused requests so never park, nor
// lead a resume; the resume they would have led checks again, on the
// policy its own Lookup returns (lookupOrResume).
//
// pre is the look made, when one was and found the actor not RUNNING,
// for the resume this request may lead (wait).
func (a *activator) admitCold(ctx context.Context, key names.ActorKey, listen bool, cred credentials) (t Target, ok bool, rv IngressReview, pre *lookup, err error) {
	p, known := a.guard.policy(key)
	if !known {
		if err := a.awaitAway(ctx, key); err != nil {
			return Target{}, false, IngressReview{}, nil, err
		}
		l, err := a.admissionLookup(ctx, key)
		if err != nil && retryable(err) && ctx.Err() == nil {
			// A control plane restarting or failing over: park, as
			// before the policy was looked up here, and retry within
			// the budget; the resume still checks the policy first.
			a.logger.Debug("ingress policy lookup failed, parking", "actor", key, "err", err)
			return Target{}, false, IngressReview{}, nil, nil
		}
		if err != nil {
			return Target{}, false, IngressReview{}, nil, err
		}
		switch {
		case l.policyOnly:
			p = l.target.Policy
		case l.running && !a.down.marked(l.target.TunnelAddr):
			a.store(key, l.target)
			t, ok, rv, err := a.acquireAdmitted(ctx, key, listen, cred)
			return t, ok, rv, nil, err
		default:
			p, pre = l.target.Policy, &l
		}
	}
	if _, err := cred.check(ctx, p); err != nil {
		return Target{}, false, IngressReview{}, nil, err
	}
	return Target{}, false, IngressReview{}, pre, nil
}

// lookup runs one Lookup of key at a time for held streams,
// remembering the policy it returns.
func (a *activator) lookup(ctx context.Context, key names.ActorKey) (lookup, error) {
	return a.sharedLookup(ctx, key, false)
}

// admissionLookup is admitCold's lookup, except that a look which starts
// after another look has remembered key's policy makes none and returns
// that policy alone (lookup.policyOnly): a request of a burst that found
// the policy unknown just before the first look ended would otherwise
// ask the control plane again, and such looks could chain (seen as a
// flaky TestConcurrentColdRequestsShareOneResume). The guard's check
// runs inside the shared call, after the previous one has ended, so no
// request of the burst can miss it. Its calls are shared apart from
// lookup's, whose callers need the actor's state.
func (a *activator) admissionLookup(ctx context.Context, key names.ActorKey) (lookup, error) {
	return a.sharedLookup(ctx, key, true)
}

// sharedLookup is lookup (admission false) and admissionLookup.
func (a *activator) sharedLookup(ctx context.Context, key names.ActorKey, admission bool) (lookup, error) {
	flight := key.String()
	if admission {
		flight = "admit/" + flight
	}
	v, _, err := a.looks.Do(ctx, flight, func(ctx context.Context) (any, error) {
		if p, known := a.guard.policy(key); admission && known {
			return lookup{target: Target{Policy: p}, policyOnly: true}, nil
		}
		t, running, err := a.res.Lookup(ctx, key)
		if err != nil {
			return nil, err
		}
		a.guard.remember(key, t.Policy)
		return lookup{target: t, running: running}, nil
	})
	if err != nil {
		return lookup{}, fmt.Errorf("look up %s: %w", key, err)
	}
	return v.(lookup), nil
}

// reviewerOf returns res's IngressReviewer side, nil when it has none.
func reviewerOf(res Resolver) IngressReviewer {
	r, _ := res.(IngressReviewer)
	return r
}

// acquire counts a request (a listening stream if listen) open on key.
func (a *activator) acquire(key names.ActorKey, listen bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.entry(key).opened(listen)
}

// opened counts a request open; a.mu must be held. Its start is
// traffic, a listening stream's included.
func (st *actorState) opened(listen bool) {
	st.open++
	if listen {
		st.listens++
	}
	st.last = time.Now()
}

// done ends a request counted by target (with the same listen).
func (a *activator) done(key names.ActorKey, listen bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if st, ok := a.actors[key]; ok {
		st.open--
		if listen {
			st.listens--
		}
		st.last = time.Now()
	}
}

// busy counts the open requests that keep the actor from being idle:
// all of them, or all but its listening streams if its policy ignores
// them. a.mu must be held.
func (st *actorState) busy() int {
	return st.target.Policy.Streams.Busy(st.open, st.listens)
}

// resolving marks whether a shared resolution of key runs, and returns
// key's away channel.
func (a *activator) resolving(key names.ActorKey, on bool) chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.entry(key)
	st.resolving = on
	return st.away
}

// tunnelGone remembers that t's address refused a connection, so that
// requests for the actors placed there park (downTunnels), and tells the
// resolver, if it caches tunnel addresses (TunnelForgetter).
func (a *activator) tunnelGone(t Target) {
	a.down.mark(t.TunnelAddr)
	if f, ok := a.res.(TunnelForgetter); ok {
		f.ForgetTunnel(t.Worker, t.TunnelAddr)
	}
}

// forget drops key's cached target if it is still t, so that a fresher
// target stored meanwhile by another request's resolution survives.
func (a *activator) forget(key names.ActorKey, t Target) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if st, ok := a.actors[key]; ok && st.target == t {
		st.target = Target{}
	}
}
