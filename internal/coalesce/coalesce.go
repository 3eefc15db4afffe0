// Package coalesce shares one run of a call among the callers that want it
// at the same time: the single way this module coalesces work, used by the
// router (resumes, assignment checks, worker-list refreshes) and by the image
// cache (unpacks).
//
// Unlike singleflight.Do, a shared call runs with a context detached from
// every caller's cancellation (it keeps the first caller's values, for
// tracing), bounded by its group's timeout: one caller giving up — a client
// disconnecting, its own budget running out — never fails the call for the
// others, and no caller ever has to "take over" a call another started.
// Each caller still stops waiting when its own context ends.
package coalesce

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
)

// ErrExpired marks the error of a shared call that ended with its group's
// timeout: a caller that has time left may start another.
var ErrExpired = errors.New("shared call ran out of time")

// Group runs one call per key at a time and shares its result with every
// caller that arrives while it runs.
//
// A Group is safe for concurrent use and must not be copied after first
// use; the zero value with Timeout set is ready.
type Group struct {
	// Timeout bounds every call the group runs. It must be positive: a
	// call's context is done once it has passed.
	Timeout time.Duration

	group singleflight.Group
	// waiting counts callers currently waiting on a shared call (after
	// they have joined it).
	waiting atomic.Int64
}

// Do runs fn under key, or joins the call already running under key, and
// waits for its result or for ctx to end (then returning context.Cause(ctx)
// while the call goes on for the others). leader reports whether this
// caller's fn is the one that ran.
func (g *Group) Do(ctx context.Context, key string, fn func(context.Context) (any, error)) (v any, leader bool, err error) {
	var led atomic.Bool
	ch := g.group.DoChan(key, func() (any, error) {
		led.Store(true)
		return g.run(ctx, fn)
	})
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	select {
	case r := <-ch:
		return r.Val, led.Load(), r.Err
	case <-ctx.Done():
		return nil, led.Load(), context.Cause(ctx)
	}
}

// Start runs fn under key in the background unless a call is already
// running under key; nobody waits for the result. The call is bounded by
// Timeout like every shared call, so the goroutine cannot outlive it.
func (g *Group) Start(ctx context.Context, key string, fn func(context.Context) (any, error)) {
	// DoChan's channel is buffered, so dropping it leaks nothing.
	g.group.DoChan(key, func() (any, error) { return g.run(ctx, fn) })
}

// Waiting returns how many callers are currently waiting in Do on a shared
// call, for metrics and for tests.
func (g *Group) Waiting() int64 { return g.waiting.Load() }

// run calls fn with ctx's values, bounded by Timeout; a failure once that
// time is up wraps ErrExpired.
func (g *Group) run(ctx context.Context, fn func(context.Context) (any, error)) (any, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.Timeout)
	defer cancel()
	v, err := fn(ctx)
	if err != nil && expired(ctx, time.Now()) {
		err = fmt.Errorf("%w after %s: %w", ErrExpired, g.Timeout, err)
	}
	return v, err
}

// expired reports whether ctx has ended or its deadline is not after now.
// ctx.Err() alone is not enough: a call can fail of its deadline before
// ctx's timer has fired — grpc-go reports an RST_STREAM(CANCEL) from the
// server as codes.DeadlineExceeded as soon as the deadline has passed by
// the clock — and such a failure must not reach the callers that joined
// the call later as if it were final.
func expired(ctx context.Context, now time.Time) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !d.After(now)
}
