package router

import (
	"context"
	"errors"
	"time"

	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/streams"
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
	// Node is the node that registered the worker: with mutual TLS the
	// tunnel must prove it is that node (Config.TunnelTLS).
	Node string
	// Assignment is the actor's assignment token (atev1.Actor.assignment,
	// decimal; empty for 0): the tunnel refuses the request unless the
	// worker's sandbox was started under it (tunnelproto.HeaderAssignment).
	Assignment string
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
	// Streams is how listening streams (streams.IsListen) weigh on
	// idleness (Streams.IgnoreIdle) and whether they resume the actor
	// (Streams.WakeOnRequest: no, they are held; hold.go).
	Streams streams.Policy
	// Ingress is who may send requests to the actor (ingress.go):
	// anyone, or requests with a bearer token the control plane accepts
	// for the actor's atespace.
	Ingress auth.IngressPolicy
}

// Resumption is what a Resume did besides waking the actor.
type Resumption struct {
	// Evicted is the idle actor the control plane checkpointed to free a
	// worker for this one; zero when no actor was evicted.
	Evicted names.ActorKey
}

// Errors of a Resolver, Idler or ActivityRecorder: the router's terms
// for what the control plane answered. Implementations wrap one of them
// (with %w, keeping the control plane's message for logs); classify and
// retryable switch on them alone.
var (
	// ErrActorNotFound: the actor (or its template) does not exist.
	ErrActorNotFound = errors.New("actor not found")
	// ErrNoCapacity: no worker was free, or freed, before the call's
	// deadline. When the deadline itself passed the error also matches
	// context.DeadlineExceeded. Retried while the request has budget.
	ErrNoCapacity = errors.New("no free worker in time")
	// ErrConflict: the control plane gave up over a concurrent change to
	// the actor. Retried while the request has budget.
	ErrConflict = errors.New("actor changed concurrently")
	// ErrInvalid: the control plane refused the request as invalid.
	ErrInvalid = errors.New("invalid request")
	// ErrNotResumable: the actor cannot be resumed in its current state
	// (being deleted or changed).
	ErrNotResumable = errors.New("actor cannot be resumed now")
	// ErrResumeFailed: the resume itself failed (the actor's start or
	// restore, as the control plane reports it), or left the actor
	// without a reachable worker. The actor keeps its last snapshot.
	ErrResumeFailed = errors.New("resume failed")
	// ErrControlPlane: any other failure of the control plane, including
	// not reaching it.
	ErrControlPlane = errors.New("control plane failed")
	// ErrUnavailable (with ErrControlPlane): no API server replica could
	// be reached, or the one reached could not reach its store — a
	// restart or failover. Retried while the request has budget.
	ErrUnavailable = errors.New("control plane unavailable")
)

// Resolver finds and wakes actors. Implementations are safe for concurrent
// use. Errors wrap the sentinels above (ErrActorNotFound, ErrNoCapacity,
// ErrConflict, ...), context.Canceled when the caller's context ended, or
// context.DeadlineExceeded (with ErrNoCapacity) when its deadline passed.
// The router tries ErrNoCapacity and ErrConflict again while the request
// has budget left.
type Resolver interface {
	// Lookup returns the actor's target when it is RUNNING; ok is false when
	// it exists but is not running, and t then carries only Actor, UID
	// and Policy (a zero Policy when the resolver does not know it), which
	// tell the router whether a listening stream may resume the actor.
	Lookup(ctx context.Context, key names.ActorKey) (t Target, ok bool, err error)
	// Resume wakes the actor (waiting for a free worker until ctx ends) and
	// returns its target once it is RUNNING and ready, with what the
	// resume did; the Resumption is zero when err is not nil.
	Resume(ctx context.Context, key names.ActorKey) (Target, Resumption, error)
	// Assigned reports whether a worker has been claimed for the actor:
	// it is being restored on one (RESUMING) or is RUNNING.
	Assigned(ctx context.Context, key names.ActorKey) (bool, error)
}

// TunnelForgetter is implemented by a Resolver that caches workers'
// tunnel addresses: ForgetTunnel drops worker's if it is still addr,
// which refused a connection (its node restarted on another port), so
// the next target reads it afresh.
type TunnelForgetter interface {
	ForgetTunnel(worker, addr string)
}

// ErrPauseUnsupported is returned by Idler.Pause when the control plane
// cannot pause actors; the router then suspends instead.
var ErrPauseUnsupported = errors.New("pause is not supported by the control plane")

// Idler puts idle actors away. Implementations are safe for concurrent use.
type Idler interface {
	// Pause checkpoints a RUNNING actor to its node's disk and frees its
	// worker. Errors: ErrPauseUnsupported (wrapped), or the Resolver's
	// sentinels.
	Pause(ctx context.Context, key names.ActorKey) error
	// Suspend checkpoints a RUNNING actor to the snapshot store and frees
	// its worker; a SUSPENDED actor is left alone. Errors: the Resolver's
	// sentinels.
	Suspend(ctx context.Context, key names.ActorKey) error
}

// Activity is when the router last saw traffic for an actor.
type Activity = names.Activity

// ActivityRecorder receives the router's activity reports (shown as the
// actor's last activity). Implementations are safe for concurrent use;
// errors wrap the Resolver's sentinels.
type ActivityRecorder interface {
	RecordActivity(ctx context.Context, acts []Activity) error
}

// HeaderTargetActor selects the actor as "<atespace>/<name>" when the Host
// header does not. The headers between router and worker tunnel are
// tunnelproto's.
const HeaderTargetActor = "Ate-Target-Actor"
