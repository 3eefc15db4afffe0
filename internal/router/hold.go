package router

import (
	"context"
	"errors"
	"time"

	"substrate.dev/ate/internal/activation"
	"substrate.dev/ate/internal/names"
)

// Tuning of held listening streams.
const (
	// holdRecheck is how often a held listening stream looks the actor
	// up again. A resume through this router wakes held streams at once
	// (store); one through another router, `ate resume` or an alarm is
	// noticed within this. Each look is one GetActor, shared by the
	// actor's held streams that look at the same moment.
	holdRecheck = 5 * time.Second
	// holdLookupTimeout bounds one such look.
	holdLookupTimeout = 5 * time.Second
)

// errHeldDrain: the router began draining while a listening stream was
// held for its sleeping actor.
var errHeldDrain = errors.New("router draining while the stream was held")

// hold serves a listening stream (streams.IsListen) to key's actor when
// the router has no target for it. If the actor is RUNNING, its target is
// stored and the stream counted open on it. If it is not and its policy
// says wakeOn: request, the stream is held, without resuming the actor
// and without taking a parking slot or budget, until the actor runs —
// a real request through this router resumed it (store wakes the held
// streams) or it was found RUNNING on a recheck (holdRecheck) — and is
// then counted open on it, as "joined". handled is false when the stream
// should park and resume the actor like any request (the policy lets
// any request wake it). Errors: the Resolver's (wrapped), errHeldDrain,
// or the cause of ctx ending (the client left).
//
// A stream whose credentials (cred) fail the actor's ingress policy is
// refused (an *ingressRefusal), never held.
func (a *activator) hold(ctx context.Context, key names.ActorKey, cred credentials) (t Target, act activated, handled bool, err error) {
	start := time.Now()
	held := false
	defer func() {
		if held {
			a.holding(key, -1)
			a.metrics.HeldStreams(-1)
		}
	}()
	for {
		if err := a.awaitAway(ctx, key); err != nil {
			return Target{}, activated{}, true, err
		}
		l, err := a.lookup(ctx, key)
		if err != nil {
			return Target{}, activated{}, true, err
		}
		if l.running {
			a.store(key, l.target)
			t, ok, rv, err := a.acquireAdmitted(ctx, key, true, cred)
			if err != nil {
				return Target{}, activated{}, true, err
			}
			if ok {
				act := activated{how: activation.Warm, subject: rv.Subject}
				if held {
					act = activated{how: activation.Joined, waited: time.Since(start), subject: rv.Subject}
				}
				return t, act, true, nil
			}
			continue // put away again meanwhile
		}
		if !l.target.Policy.Streams.WakeOnRequest {
			return Target{}, activated{}, false, nil
		}
		if _, err := cred.check(ctx, l.target.Policy); err != nil {
			return Target{}, activated{}, true, err
		}
		if !held {
			held = true
			a.holding(key, 1)
			a.metrics.HeldStreams(1)
			a.logger.Debug("listening stream held until the actor runs", "actor", key)
		}
		if err := a.awaitWake(ctx, key); err != nil {
			return Target{}, activated{}, true, err
		}
	}
}

// lookup is the result of one shared Lookup.
type lookup struct {
	target  Target
	running bool
	// policyOnly: no Lookup was made, target holds only the policy the
	// guard had remembered (admissionLookup).
	policyOnly bool
}

// awaitAway waits for this router's own pause or suspend of key, if one
// runs, to finish: a Lookup meanwhile may find the actor RUNNING just
// before its worker goes.
func (a *activator) awaitAway(ctx context.Context, key names.ActorKey) error {
	a.mu.Lock()
	var away chan struct{}
	if st, ok := a.actors[key]; ok {
		away = st.away
	}
	a.mu.Unlock()
	if away == nil {
		return nil
	}
	select {
	case <-away:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// awaitWake waits until a target of key is stored, holdRecheck passes,
// the router drains (errHeldDrain) or ctx ends (its cause).
func (a *activator) awaitWake(ctx context.Context, key names.ActorKey) error {
	a.mu.Lock()
	st := a.entry(key)
	if st.target != (Target{}) {
		a.mu.Unlock()
		return nil // stored since the lookup
	}
	if st.woken == nil {
		st.woken = make(chan struct{})
	}
	woken := st.woken
	a.mu.Unlock()
	t := time.NewTimer(holdRecheck)
	defer t.Stop()
	select {
	case <-woken:
	case <-t.C:
	case <-a.draining:
		return errHeldDrain
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	return nil
}

// holding adds delta to key's held streams, which keep its entry (and so
// its woken channel) from being pruned.
func (a *activator) holding(key names.ActorKey, delta int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.entry(key).held += delta
}

// drain ends every held stream (errHeldDrain), now and from now on.
func (a *activator) drain() {
	a.drainOnce.Do(func() { close(a.draining) })
}
