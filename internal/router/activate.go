package router

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"substrate.dev/ate/internal/names"
)

// activation says how a request found its actor; it is sent to the client
// in the Ate-Activation response header.
type activation string

const (
	// activationWarm: the actor was already running.
	activationWarm activation = "warm"
	// activationResumed: this request triggered the resume.
	activationResumed activation = "resumed"
	// activationJoined: this request waited on another request's resume.
	activationJoined activation = "joined"
)

// activator turns an actor key into a RUNNING target: from its cache, or by
// a Lookup and, when the actor is not running, a Resume. Lookup and Resume
// are coalesced per actor, and requests waiting for them are "parked":
// bounded in number (parkMax, across all actors) and in time (budget).
//
// An activator is safe for concurrent use.
type activator struct {
	res     Resolver
	logger  *slog.Logger
	budget  time.Duration
	parkMax int64
	// parked counts requests admitted to wait for a resolution; it never
	// exceeds parkMax.
	parked atomic.Int64
	// flights runs one Lookup(+Resume) per actor at a time; keyed by
	// ActorKey.String().
	flights coalescer

	mu sync.Mutex
	// cache holds the last RUNNING target seen per actor; guarded by mu.
	// Entries are dropped when a tunnel rejects or cannot be reached, so a
	// stale one costs one failed attempt. It grows with the number of
	// actors ever addressed (a few hundred bytes each).
	cache map[names.ActorKey]Target
}

func newActivator(res Resolver, cfg Config, logger *slog.Logger) *activator {
	return &activator{
		res:     res,
		logger:  logger,
		budget:  cfg.ParkBudget,
		parkMax: int64(cfg.ParkMax),
		flights: coalescer{timeout: cfg.ParkBudget},
		cache:   make(map[names.ActorKey]Target),
	}
}

// resolution is the result of one shared Lookup(+Resume).
type resolution struct {
	target  Target
	resumed bool
}

// target returns key's RUNNING target and how it was found. Errors are
// the Resolver's (wrapped), errParkFull, errParkBudget, or the cause of
// ctx ending.
func (a *activator) target(ctx context.Context, key names.ActorKey) (Target, activation, error) {
	if t, ok := a.cached(key); ok {
		return t, activationWarm, nil
	}
	if !a.admit() {
		return Target{}, "", fmt.Errorf("park request for %s: %w", key, errParkFull)
	}
	defer a.parked.Add(-1)
	// The cause tells a spent budget (503) from a client gone (499).
	ctx, cancel := context.WithTimeoutCause(ctx, a.budget, errParkBudget)
	defer cancel()
	v, leader, err := a.flights.do(ctx, key.String(), func(ctx context.Context) (any, error) {
		return a.lookupOrResume(ctx, key)
	})
	if err != nil {
		return Target{}, "", fmt.Errorf("wait for %s: %w", key, err)
	}
	r := v.(resolution)
	switch {
	case !r.resumed:
		return r.target, activationWarm, nil
	case leader:
		return r.target, activationResumed, nil
	default:
		return r.target, activationJoined, nil
	}
}

// prewarm starts resolving key in the background (or leaves a running
// resolution alone) without parking anyone: a client told to retry then
// finds its actor running. ctx only lends its values.
func (a *activator) prewarm(ctx context.Context, key names.ActorKey) {
	a.flights.start(ctx, key.String(), func(ctx context.Context) (any, error) {
		r, err := a.lookupOrResume(ctx, key)
		if err != nil {
			// Nobody waits for this call; its error ends here.
			a.logger.Warn("background resume failed", "actor", key.Name, "atespace", key.Atespace, "err", err)
		}
		return r, err
	})
}

// admit reserves a parking slot unless parkMax are taken.
func (a *activator) admit() bool {
	for {
		n := a.parked.Load()
		if n >= a.parkMax {
			return false
		}
		if a.parked.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// lookupOrResume is the shared call: it runs once per actor at a time,
// with a context detached from any one request.
func (a *activator) lookupOrResume(ctx context.Context, key names.ActorKey) (resolution, error) {
	t, running, err := a.res.Lookup(ctx, key)
	if err != nil {
		return resolution{}, fmt.Errorf("look up %s: %w", key, err)
	}
	if !running {
		start := time.Now()
		t, err = a.res.Resume(ctx, key)
		if err != nil {
			return resolution{}, fmt.Errorf("resume %s: %w", key, err)
		}
		a.logger.Info("actor resumed", "actor", key.Name, "atespace", key.Atespace,
			"worker", t.Worker, "duration", time.Since(start))
	}
	a.mu.Lock()
	a.cache[key] = t
	a.mu.Unlock()
	return resolution{target: t, resumed: !running}, nil
}

func (a *activator) cached(key names.ActorKey) (Target, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.cache[key]
	return t, ok
}

// forget drops key's cached target if it is still t, so that a fresher
// target stored meanwhile by another request's resolution survives.
func (a *activator) forget(key names.ActorKey, t Target) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cache[key] == t {
		delete(a.cache, key)
	}
}
