package router

import (
	"context"
	"errors"
	"sync"
	"time"

	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/names"
)

// Bounds on the background loop's calls to the control plane.
const (
	// idleActionTimeout bounds one pause or suspend: a checkpoint waits
	// up to the template's drain grace (default 10 s) and then writes the
	// actor's memory, which takes seconds for large actors.
	idleActionTimeout = 2 * time.Minute
	// activityReportTimeout bounds one RecordActivity call; a report
	// that fails is retried with the next one.
	activityReportTimeout = 5 * time.Second
)

// Start runs the router's background work until ctx ends: every
// Config.IdleCheckInterval it pauses or suspends (Config.Idler) RUNNING
// actors that have had no traffic for their template's idle.after — a
// request in flight, an open stream or WebSocket counts as traffic, a
// listening stream unless the template's streams.idle is ignore — and
// every Config.ActivityInterval it reports the activity it saw since the
// last report (Config.Activity). When ctx ends it waits for the pauses
// and suspends it started (they are cancelled with ctx), sends a last
// report, and returns nil.
//
// Run it for as long as the handler serves: during a drain, parked
// requests may need the workers that idle actors free.
func (h *Handler) Start(ctx context.Context) error {
	var actions sync.WaitGroup
	// Deferred calls run last first: the actions end, then the report.
	defer h.report(context.WithoutCancel(ctx))
	defer actions.Wait()
	idle := time.NewTicker(h.cfg.IdleCheckInterval)
	defer idle.Stop()
	lastReport := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-idle.C:
			if h.cfg.Idler != nil {
				for _, ia := range h.act.idleActors(now) {
					actions.Go(func() { h.putAway(ctx, ia, now) })
				}
			}
			if now.Sub(lastReport) >= h.cfg.ActivityInterval {
				h.report(ctx)
				lastReport = now
			}
			h.act.prune(h.cfg.Activity == nil)
		}
	}
}

// putAway pauses or suspends ia's actor, as its policy says, and lets
// resolutions of the actor go on afterwards. Activity not yet reported is
// reported first, so the actor's record has its last activity by the time
// it is put away (periodic reports skip actors being put away).
func (h *Handler) putAway(ctx context.Context, ia idleActor, decided time.Time) {
	t := ia.target
	defer h.act.back(t.Actor)
	key := t.Actor
	log := h.logger.With("actor", key, "worker", t.Worker)
	ctx, cancel := context.WithTimeout(ctx, idleActionTimeout)
	defer cancel()
	if ia.unreported != nil && h.cfg.Activity != nil {
		acts := []Activity{*ia.unreported}
		if err := h.cfg.Activity.RecordActivity(ctx, acts); err != nil {
			log.Warn("activity report before putting the actor away failed; it is retried with the next report", "err", err)
		} else {
			h.act.reported(acts)
		}
	}
	action := t.Policy.IdleAction
	var err error
	if action == checkpoint.Pause {
		err = h.cfg.Idler.Pause(ctx, key)
		if errors.Is(err, ErrPauseUnsupported) {
			log.Warn("control plane cannot pause actors; suspending the idle actor instead", "err", err)
			action = checkpoint.Suspend
		}
	}
	if action != checkpoint.Pause {
		action = checkpoint.Suspend
		err = h.cfg.Idler.Suspend(ctx, key)
	}
	if err != nil {
		log.Warn("idle actor not put away", "action", action, "err", err)
		return
	}
	log.Info("idle actor put away", "action", action, "idleAfter", t.Policy.IdleAfter,
		"duration", time.Since(decided))
}

// report sends the activity seen since the last successful report.
func (h *Handler) report(ctx context.Context) {
	if h.cfg.Activity == nil {
		return
	}
	acts := h.act.unreported(time.Now())
	if len(acts) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, activityReportTimeout)
	defer cancel()
	if err := h.cfg.Activity.RecordActivity(ctx, acts); err != nil {
		h.logger.Warn("activity report failed; it is retried with the next one", "actors", len(acts), "err", err)
		return
	}
	h.act.reported(acts)
}

// idleActor is an actor to put away, with its activity not yet reported
// (nil when there is none).
type idleActor struct {
	target     Target
	unreported *Activity
}

// idleActors returns the actors idle past their policy's IdleAfter at
// now, and marks them away: their targets are dropped (new requests park)
// and resolutions wait for back.
func (a *activator) idleActors(now time.Time) []idleActor {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []idleActor
	for key, st := range a.actors {
		after := st.target.Policy.IdleAfter
		if st.target == (Target{}) || after <= 0 || st.busy() > 0 || st.away != nil || now.Sub(st.last) < after {
			continue
		}
		st.away = make(chan struct{})
		ia := idleActor{target: st.target}
		st.target = Target{}
		if st.last.After(st.reported) {
			ia.unreported = &Activity{Actor: key, Last: st.last}
		}
		out = append(out, ia)
	}
	return out
}

// back ends key's away state.
func (a *activator) back(key names.ActorKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if st, ok := a.actors[key]; ok && st.away != nil {
		close(st.away)
		st.away = nil
	}
}

// openRefresh is how often an actor with a request open (a long stream,
// a WebSocket; not a listening stream its policy ignores) but no request
// starting or ending is reported as active again. Each report is a store write, so reporting such actors on every
// round would cost one write per open stream every ActivityInterval.
const openRefresh = 30 * time.Second

// unreported returns each actor's activity newer than its last report.
// An actor with a request open is active now, but is reported again only
// openRefresh after its last report. Actors this router is resuming or
// putting away wait for the next report: recording activity writes the
// actor's record, which the workflow is rewriting.
func (a *activator) unreported(now time.Time) []Activity {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Activity
	for key, st := range a.actors {
		if st.resolving || st.away != nil {
			continue
		}
		last := st.last
		if st.busy() > 0 && now.Sub(st.reported) >= openRefresh {
			last = now
		}
		if last.After(st.reported) {
			out = append(out, Activity{Actor: key, Last: last})
		}
	}
	return out
}

// reported records acts as sent.
func (a *activator) reported(acts []Activity) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, act := range acts {
		if st, ok := a.actors[act.Actor]; ok && act.Last.After(st.reported) {
			st.reported = act.Last
		}
	}
}

// prune drops entries that hold nothing any more: no target, no request,
// no idle action, and (unless reports are off) no unreported activity.
func (a *activator) prune(noReports bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for key, st := range a.actors {
		if st.target == (Target{}) && st.open == 0 && st.held == 0 && st.away == nil && !st.resolving && (noReports || !st.last.After(st.reported)) {
			delete(a.actors, key)
		}
	}
}
