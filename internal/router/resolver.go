package router

import (
	"context"
	"errors"
	"time"

	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/names"
)

// Target is where an actor's traffic goes right now: the worker tunnel that
// fronts the worker the actor is assigned to. Targets are comparable.
type Target struct {
	Actor names.ActorKey
	// UID identifies this incarnation of the actor; the tunnel rejects a
	// request whose UID is not the one assigned to the worker (421).
	UID string
	// Worker is the worker's name; TunnelAddr the tunnel's host:port.
	Worker     string
	TunnelAddr string
	// Policy is the routing policy of the actor's template.
	Policy Policy
}

// Policy is the part of an actor's template the router enforces. Zero
// durations mean the router's defaults (Config); it is comparable.
type Policy struct {
	// RouteTimeout bounds the wait for the actor's response header once
	// the request has been sent to its worker. 0: Config.RouteTimeout.
	RouteTimeout time.Duration
	// StreamIdleTimeout bounds the silence in a response body or an
	// upgraded connection (both directions). 0: Config.StreamIdleTimeout.
	StreamIdleTimeout time.Duration
	// IdleAfter is how long the actor may go without traffic (no request
	// in flight, no open stream or WebSocket) before IdleAction is taken;
	// 0 disables idle handling.
	IdleAfter  time.Duration
	IdleAction checkpoint.Action
}

// Resumption is what a Resume did besides waking the actor.
type Resumption struct {
	// Evicted is the idle actor the control plane checkpointed to free a
	// worker for this one; zero when no actor was evicted.
	Evicted names.ActorKey
}

// Resolver finds and wakes actors. Implementations are safe for concurrent
// use. Errors are gRPC status errors (codes.NotFound for an unknown actor,
// codes.ResourceExhausted or codes.DeadlineExceeded when no worker freed in
// time, codes.Aborted when a concurrent change made the control plane give
// up, codes.InvalidArgument, codes.FailedPrecondition, codes.Unavailable
// when the resume itself failed). The router tries ResourceExhausted,
// DeadlineExceeded and Aborted again while the request has budget left.
type Resolver interface {
	// Lookup returns the actor's target when it is RUNNING; ok is false when
	// it exists but is not running.
	Lookup(ctx context.Context, key names.ActorKey) (t Target, ok bool, err error)
	// Resume wakes the actor (waiting for a free worker until ctx ends) and
	// returns its target once it is RUNNING and ready, with what the
	// resume did; the Resumption is zero when err is not nil.
	Resume(ctx context.Context, key names.ActorKey) (Target, Resumption, error)
	// Assigned reports whether a worker has been claimed for the actor:
	// it is being restored on one (RESUMING) or is RUNNING.
	Assigned(ctx context.Context, key names.ActorKey) (bool, error)
}

// ErrPauseUnsupported is returned by Idler.Pause when the control plane
// cannot pause actors; the router then suspends instead.
var ErrPauseUnsupported = errors.New("pause is not supported by the control plane")

// Idler puts idle actors away. Implementations are safe for concurrent use.
type Idler interface {
	// Pause checkpoints a RUNNING actor to its node's disk and frees its
	// worker. Errors: ErrPauseUnsupported (wrapped), or the control
	// plane's gRPC status errors.
	Pause(ctx context.Context, key names.ActorKey) error
	// Suspend checkpoints a RUNNING actor to the snapshot store and frees
	// its worker; a SUSPENDED actor is left alone.
	Suspend(ctx context.Context, key names.ActorKey) error
}

// Activity is when the router last saw traffic for an actor.
type Activity = names.Activity

// ActivityRecorder receives the router's activity reports (shown as the
// actor's last activity). Implementations are safe for concurrent use.
type ActivityRecorder interface {
	RecordActivity(ctx context.Context, acts []Activity) error
}

// Tunnel protocol headers: the router names the worker and the actor
// incarnation it expects; the tunnel answers 421 Misdirected Request when
// the worker no longer hosts that actor.
const (
	HeaderWorker   = "Ate-Worker"
	HeaderActorUID = "Ate-Actor-Uid"
	// HeaderTargetActor selects the actor as "<atespace>/<name>" when the
	// Host header does not.
	HeaderTargetActor = "Ate-Target-Actor"
	// HeaderTunnelError marks an answer the tunnel made itself because
	// the actor gave none (WriteTunnelError); its value is one of the
	// TunnelError kinds. The router never relays such an answer, marker
	// included: it answers with its own text (classify). An actor's
	// response carrying the header is taken for the tunnel's too; that
	// only lets an actor turn its own answer into an error.
	HeaderTunnelError = "Ate-Tunnel-Error"
)

// Kinds of HeaderTunnelError.
const (
	// TunnelErrorRefused: nothing listens on the actor's port.
	TunnelErrorRefused = "refused"
	// TunnelErrorUpstream: the connection to the actor's port failed
	// otherwise, or broke before the actor answered.
	TunnelErrorUpstream = "upstream"
	// TunnelErrorCut: the request was cut before an answer because the
	// actor's container was checkpointed after its drain grace, or
	// stopped (errCut in internal/node).
	TunnelErrorCut = "cut"
)
