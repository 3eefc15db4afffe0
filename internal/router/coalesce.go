package router

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
)

// coalescer runs one call per key at a time and shares its result with
// every caller that arrives while it runs. Unlike singleflight.Do, the call
// runs with a context detached from every caller's cancellation (it keeps
// the first caller's values, for tracing), bounded by timeout: one caller
// giving up — a client disconnecting, its own budget running out — never
// fails the call for the others. Each caller still stops waiting when its
// own context ends.
//
// A coalescer is safe for concurrent use; the zero value with timeout set
// is ready.
type coalescer struct {
	group   singleflight.Group
	timeout time.Duration
	// waiting counts callers currently waiting on a shared call (after
	// they have joined it); exposed for metrics and for tests.
	waiting atomic.Int64
}

// do runs fn under key, or joins the call already running under key, and
// waits for its result or for ctx to end (then returning context.Cause(ctx)).
// leader reports whether this caller's fn is the one that ran.
func (c *coalescer) do(ctx context.Context, key string, fn func(context.Context) (any, error)) (v any, leader bool, err error) {
	var led atomic.Bool
	ch := c.group.DoChan(key, func() (any, error) {
		led.Store(true)
		return c.run(ctx, fn)
	})
	c.waiting.Add(1)
	defer c.waiting.Add(-1)
	select {
	case r := <-ch:
		return r.Val, led.Load(), r.Err
	case <-ctx.Done():
		return nil, led.Load(), context.Cause(ctx)
	}
}

// start runs fn under key in the background unless a call is already
// running under key; nobody waits for the result. The call is bounded by
// timeout like every shared call, so the goroutine cannot outlive it.
func (c *coalescer) start(ctx context.Context, key string, fn func(context.Context) (any, error)) {
	// DoChan's channel is buffered, so dropping it leaks nothing.
	c.group.DoChan(key, func() (any, error) { return c.run(ctx, fn) })
}

// errCallExpired marks the error of a shared call that ended with its
// timeout: a caller that has time left may start another.
var errCallExpired = errors.New("shared call ran out of time")

// run calls fn with ctx's values, bounded by timeout; a failure once that
// time is up wraps errCallExpired.
func (c *coalescer) run(ctx context.Context, fn func(context.Context) (any, error)) (any, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	defer cancel()
	v, err := fn(ctx)
	if err != nil && expired(ctx, time.Now()) {
		err = fmt.Errorf("%w after %s: %w", errCallExpired, c.timeout, err)
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
