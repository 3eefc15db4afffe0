// Package runner runs a component's long-lived parts under one
// lifecycle, in the spirit of controller-runtime's manager: parts start
// in the order they were added, the whole stops when its context ends or
// a part fails, and then the parts stop one at a time in reverse order,
// each after the ones started after it have returned. Steps that belong
// to shutdown alone (ate up suspends every actor after its router has
// drained and before its API server stops) take their place in that
// order too. It is the one place a component's start and stop order is
// written down; the components (internal/up) only list their parts.
package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// Runner is an ordered list of parts. Add every part, then call Run
// once.
type Runner struct {
	log   *slog.Logger
	parts []part

	mu       sync.Mutex
	state    string // "" (not started), "running", "stopping"
	notReady map[string]func() error
}

type part struct {
	name string
	// run serves until its context ends; nil for a stop step.
	run func(context.Context) error
	// stop is a stop step's work; nil for a part.
	stop func(context.Context) error
}

// New returns an empty runner logging to log (nil: discard).
func New(log *slog.Logger) *Runner {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runner{log: log, notReady: map[string]func() error{}}
}

// Add appends a part: run serves until its context ends, then returns
// nil (or an error that is reported); returning an error before that
// stops the whole. A part that has nothing more to do may return nil
// early without stopping the others.
func (r *Runner) Add(name string, run func(ctx context.Context) error) {
	r.parts = append(r.parts, part{name: name, run: run})
}

// AddStop appends a shutdown step: when the stop, going in reverse
// order, reaches it — every part added after it has returned, every
// part added before it still runs — stop runs to completion (ctx is
// the shutdown's, uncancelled: bound it yourself). Its error is
// reported and the stop goes on.
func (r *Runner) AddStop(name string, stop func(ctx context.Context) error) {
	r.parts = append(r.parts, part{name: name, stop: stop})
}

// ReadyWhen adds a readiness condition: Ready fails with check's error
// while check fails.
func (r *Runner) ReadyWhen(name string, check func() error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notReady[name] = check
}

// Ready reports whether the runner serves: every part started, no stop
// begun, and every ReadyWhen condition holds. For /readyz.
func (r *Runner) Ready() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.state {
	case "":
		return errors.New("starting")
	case "stopping":
		return errors.New("shutting down")
	}
	for name, check := range r.notReady {
		if err := check(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func (r *Runner) setState(s string) {
	r.mu.Lock()
	r.state = s
	r.mu.Unlock()
}

// Run starts the parts in order and blocks until ctx ends or a part
// fails, then stops them in reverse order and returns the first error
// (the failure that stopped the whole, else the first reported while
// stopping). Each part's context is its own, cancelled only when the
// stop reaches it, so a part added early (an API server) keeps serving
// while later ones (a router draining its requests) finish.
func (r *Runner) Run(ctx context.Context) error {
	failed := make(chan error, len(r.parts))
	type running struct {
		cancel context.CancelFunc
		done   chan error
	}
	started := make([]running, len(r.parts))
	for i, p := range r.parts {
		if p.run == nil {
			continue
		}
		pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan error, 1)
		started[i] = running{cancel: cancel, done: done}
		go func() {
			err := p.run(pctx)
			if err != nil && pctx.Err() == nil {
				err = fmt.Errorf("%s: %w", p.name, err)
				failed <- err
			}
			done <- err
		}()
	}
	r.setState("running")
	var first error
	select {
	case <-ctx.Done():
	case first = <-failed:
		r.log.Error("stopping: a part failed", "err", first)
	}
	r.setState("stopping")
	stopCtx := context.WithoutCancel(ctx)
	for i := len(r.parts) - 1; i >= 0; i-- {
		p := r.parts[i]
		var err error
		if p.stop != nil {
			err = p.stop(stopCtx)
		} else {
			started[i].cancel()
			err = <-started[i].done
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			if first == nil {
				first = err
			}
			if !errors.Is(err, first) {
				r.log.Warn("stopping", "part", p.name, "err", err)
			}
		}
	}
	return first
}
